package testcontainers

import (
	"strings"
	"testing"
	"time"
)

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []Option
		image   string
		startup time.Duration
		wantErr string
	}{
		{name: "defaults", image: "redis:7", startup: DefaultStartupTimeout},
		{name: "image", opts: []Option{WithImage("mirror.example/redis:7.4")}, image: "mirror.example/redis:7.4", startup: DefaultStartupTimeout},
		{name: "timeout", opts: []Option{WithStartupTimeout(time.Minute)}, image: "redis:7", startup: time.Minute},
		{name: "nil option ignored", opts: []Option{nil}, image: "redis:7", startup: DefaultStartupTimeout},
		{name: "empty image", opts: []Option{WithImage(" ")}, wantErr: "WithImage got an empty image reference"},
		{name: "zero timeout", opts: []Option{WithStartupTimeout(0)}, wantErr: "WithStartupTimeout(0s) must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := newConfig("redis:7", tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.image != tc.image || cfg.startup != tc.startup {
				t.Fatalf("got image %q startup %v, want %q %v", cfg.image, cfg.startup, tc.image, tc.startup)
			}
		})
	}
}

// Without a container engine every helper skips its test, saying why, rather than
// failing or hanging.
func TestNoEngineSkips(t *testing.T) {
	if engineAnswers() == nil {
		t.Skip("a container engine answers here; the containers' own tests run instead")
	}
	if required() {
		t.Skip(requireEnv + " is set: a missing engine fails tests instead of skipping them")
	}
	for name, run := range map[string]func(testing.TB){
		"Redis":    func(t testing.TB) { Redis(t) },
		"RabbitMQ": func(t testing.TB) { RabbitMQ(t) },
		"Kafka":    func(t testing.TB) { Kafka(t) },
		"Postgres": func(t testing.TB) { Postgres(t) },
	} {
		var skipped bool
		t.Run(name, func(t *testing.T) {
			defer func() { skipped = t.Skipped() }()
			run(t)
		})
		if !skipped {
			t.Errorf("%s: the test was not skipped without a container engine", name)
		}
	}
}
