package testenv

import (
	"runtime"
	"time"
	"weak"
)

// Reachable counts the objects of ps that a collection leaves, collecting again
// for up to a second while more than most are left (work still settling may keep
// its objects a little longer), and returns the last count. A test of what a
// long-running consumer lets go of takes weak pointers to what it handed out and
// asks how many outlive their use.
func Reachable[T any](ps []weak.Pointer[T], most int) int {
	live := 0
	for try := 0; try < 20; try++ {
		runtime.GC()
		runtime.GC()
		live = 0
		for _, p := range ps {
			if p.Value() != nil {
				live++
			}
		}
		if live <= most {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return live
}
