package redis_test

import (
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
)

// TestMain stops the redis-server the package's tests share once they are done.
func TestMain(m *testing.M) { testenv.Run(m) }
