package typednil_test

import (
	"testing"

	"github.com/idemkit/idemkit/internal/typednil"
)

type clock interface{ Now() int }

type fixed struct{}

func (*fixed) Now() int { return 1 }

func TestIs(t *testing.T) {
	var nilFixed *fixed
	var nilIface clock
	cases := []struct {
		name string
		v    any
		want bool
	}{
		{"typed nil pointer", nilFixed, true},
		{"typed nil in an interface", clock(nilFixed), true},
		{"nil interface", nilIface, false},
		{"untyped nil", nil, false},
		{"pointer", &fixed{}, false},
		{"value", 3, false},
	}
	for _, c := range cases {
		if got := typednil.Is(c.v); got != c.want {
			t.Errorf("%s: Is = %v, want %v", c.name, got, c.want)
		}
	}
}
