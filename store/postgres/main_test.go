package postgres

import (
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) {
	if crashMember() || crashWorker() || killMember() || stopOwner() {
		return
	}
	testenv.Run(m)
}
