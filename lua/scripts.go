package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed record.lua
	recordSrc string
	//go:embed begin.lua
	beginSrc string
	//go:embed complete.lua
	completeSrc string
	//go:embed fail.lua
	failSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed peek.lua
	peekSrc string
	//go:embed operator.lua
	operatorSrc string
)

// Script is the handle of one embedded script: its name, source and SHA-1.
type Script struct {
	name string
	src  string
	s    *redis.Script
}

// newScript is one script with the record layout's functions before it.
func newScript(name, src string) *Script {
	src = recordSrc + "\n" + src
	return &Script{name: name, src: src, s: redis.NewScript(src)}
}

// Name is the script's file name without the .lua suffix.
func (s *Script) Name() string { return s.name }

// Source is the script's Lua text, the record layout's functions included.
func (s *Script) Source() string { return s.src }

// Hash is the SHA-1 digest that EVALSHA uses.
func (s *Script) Hash() string { return s.s.Hash() }

// Handles of the embedded scripts.
var (
	BeginScript    = newScript("begin", beginSrc)
	CompleteScript = newScript("complete", completeSrc)
	FailScript     = newScript("fail", failSrc)
	ExtendScript   = newScript("extend", extendSrc)
	ReleaseScript  = newScript("release", releaseSrc)
	PeekScript     = newScript("peek", peekSrc)
	// OperatorScript runs an operator's unstick, forget or rerun (see Runner.Operate).
	OperatorScript = newScript("operator", operatorSrc)
)

// All lists every script, for loading them up front.
func All() []*Script {
	return []*Script{BeginScript, CompleteScript, FailScript, ExtendScript, ReleaseScript, PeekScript, OperatorScript}
}
