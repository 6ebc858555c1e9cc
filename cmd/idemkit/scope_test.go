package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// failed records key as failed for good in scope, as a service would have.
func failed(t *testing.T, prefix, scope string, key consumer.Key) {
	t.Helper()
	opts := []consumer.Option{consumer.WithPrefix(prefix)}
	if scope != "" {
		opts = append(opts, consumer.WithScope(scope))
	}
	store, err := redisstore.NewStore(testenv.Redis(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	r := consumer.ExecuteIdempotently(context.Background(), store, key, []byte("x"), func(context.Context) (int, error) {
		return 0, consumer.Permanent(errors.New("declined"))
	})
	if !errors.Is(r.Err, consumer.ErrPermanent) {
		t.Fatalf("record %s: %v", key, r.Err)
	}
}

// The commands that change records or run handlers (unstick, forget, rerun, replay,
// redrive) refuse to work without --scope [IDEMKIT_SCOPE] or on the default scope,
// dry runs included, with exit 2 and the rule's own words, before they connect to
// a broker or touch a record. The commands that only read work on any scope and
// say which one they read.
func TestCommandsThatChangeRecordsNeedTheServicesScope(t *testing.T) {
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	failed(t, prefix, "", "order-1")
	failed(t, prefix, "payments", "order-1")
	jl := filepath.Join(t.TempDir(), "m.jsonl")
	if err := os.WriteFile(jl, []byte(`{"key":"order-2","payload":"x"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	global := []string{"--redis", addr, "--prefix", prefix, "--kafka-brokers", "127.0.0.1:1", "--amqp-url", "amqp://guest:guest@127.0.0.1:1/",
		"--timeout", "300ms"}
	commands := [][]string{
		{"unstick", "order-1", "--reason", "r"},
		{"forget", "order-1", "--reason", "r"},
		{"rerun", "order-1", "--reason", "r"},
		{"replay", "--jsonl", jl, "--exec", "touch " + ran},
		{"replay", "--jsonl", jl, "--exec", "touch " + ran, "--execute"},
		{"redrive", "--topic", "pay.dlq"},
		{"redrive", "--topic", "pay.dlq", "--rerun", "--reason", "r", "--execute"},
		{"redrive", "--queue", "pay.dlq"},
	}
	for _, scope := range []struct {
		flags, env []string
		says       string
	}{
		{nil, nil, "no --scope was given"},
		{[]string{"--scope", "default"}, nil, `--scope "default"`},
		{nil, []string{"IDEMKIT_SCOPE=default"}, `--scope "default"`},
	} {
		for _, c := range commands {
			args := append(append(append([]string{}, global...), scope.flags...), c...)
			r := idemkitEnv(t, scope.env, args...)
			expect(t, r, exitUsage, scope.says, `the store has the default scope "default"`, "give --scope", "IDEMKIT_SCOPE")
		}
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("a replay on the default scope ran its command: %v", err)
	}

	// The records are as the services left them; the read-only commands read any
	// scope and say which.
	local := []string{"--redis", addr, "--prefix", prefix}
	r := idemkit(t, append(local, "inspect", "order-1", "--json")...)
	var rec map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rec) != nil || rec["scope"] != "default" || rec["state"] != "failed" || rec["fence"] != float64(1) {
		t.Fatalf("inspect on the default scope: %+v", r)
	}
	expect(t, idemkit(t, append(local, "inspect", "order-1")...), 0, `reading scope "default": no --scope was given`)
	expect(t, idemkit(t, append(local, "inspect", "order-2")...), exitNotFound, `in scope "default"`, "no --scope was given")
	expect(t, idemkit(t, append(local, "list")...), 0, "2 records in every scope (no --scope was given)")
	expect(t, idemkit(t, append(local, "--scope", "payments", "list")...), 0, `1 records in scope "payments"`)
	r = idemkit(t, append(local, "list", "--json")...)
	var page struct {
		Scope   *string
		Records []map[string]any
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil || page.Scope == nil || *page.Scope != "" || len(page.Records) != 2 {
		t.Fatalf("list --json of every scope: %+v", r)
	}
	expect(t, idemkit(t, append(local, "plan", "--jsonl", jl)...), 0, `in scope "default"`, "no --scope was given")

	// The service's scope, from the flag or its environment variable, is accepted.
	expect(t, idemkitEnv(t, []string{"IDEMKIT_SCOPE=payments"}, append(local, "rerun", "order-1", "--reason", "fixed")...), 0,
		"rerun payments/order-1: failed -> retry")
	if !strings.Contains(idemkit(t, append(local, "inspect", "order-1")...).stdout, "failed") {
		t.Fatal("the rerun in scope payments changed the default scope's record")
	}
}
