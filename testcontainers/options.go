package testcontainers

import (
	"fmt"
	"strings"
	"time"
)

// An Option changes how a server's container is started.
type Option interface{ apply(*config) }

type config struct {
	image   string
	startup time.Duration
}

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

// DefaultStartupTimeout bounds pulling the image, starting the container and
// waiting for the server to accept clients, unless WithStartupTimeout says otherwise.
const DefaultStartupTimeout = 3 * time.Minute

// WithImage runs ref (for example "redis:7.4" or a mirror of your registry)
// instead of the server's default image, which each function's documentation
// names. The image must be the same server: the readiness checks read its log.
func WithImage(ref string) Option { return optFunc(func(c *config) { c.image = ref }) }

// WithStartupTimeout bounds pulling the image, starting the container and waiting
// until the server accepts clients (default DefaultStartupTimeout, 3 minutes).
func WithStartupTimeout(d time.Duration) Option {
	return optFunc(func(c *config) { c.startup = d })
}

func newConfig(defaultImage string, opts []Option) (config, error) {
	c := config{image: defaultImage, startup: DefaultStartupTimeout}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c, c.validate()
}

func (c config) validate() error {
	if strings.TrimSpace(c.image) == "" {
		return fmt.Errorf("testcontainers: WithImage got an empty image reference; pass one such as %q, or leave the option out for the default", "redis:7")
	}
	if c.startup <= 0 {
		return fmt.Errorf("testcontainers: WithStartupTimeout(%v) must be positive; leave the option out for the default of %v", c.startup, DefaultStartupTimeout)
	}
	return nil
}
