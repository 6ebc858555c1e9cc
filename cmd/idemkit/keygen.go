package main

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/spf13/cobra"
)

func (a *app) keygenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keygen NS PARTS...",
		Short: "print the key consumer.NewKey(NS, PARTS...) derives, to find a record from business ids",
		Long: `keygen prints the key a service derives with consumer.NewKey(ns, parts...).

NS is the namespace UUID the service passes to NewKey. A NS that is not a UUID is
taken as the name the service made its namespace from with
uuid.NewSHA1(uuid.NameSpaceURL, []byte(NS)), as the NewKey documentation shows.

  idemkit inspect "$(idemkit keygen https://example.com/charges order 42)"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usagef("keygen takes NS and the key's parts: idemkit keygen NS PARTS...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, err := uuid.Parse(args[0])
			from := "uuid"
			if err != nil {
				ns, from = uuid.NewSHA1(uuid.NameSpaceURL, []byte(args[0])), "name"
			}
			key := consumer.NewKey(ns, args[1:]...)
			if a.json {
				return a.printJSON(map[string]any{"key": string(key), "namespace": ns.String(), "namespace_from": from, "parts": args[1:]})
			}
			fmt.Fprintln(a.out, key)
			return nil
		},
	}
}
