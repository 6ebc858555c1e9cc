package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Checkpoint is how far a replay got: for each partition, the offset of the first
// message not yet settled. It is written only after the effects of every message
// before it were recorded in the store, so a replay resumed from it skips only
// settled work (and the store turns any overlap into DUPLICATEs).
type Checkpoint struct {
	// Source names what was replayed (a topic range, a file), so that a checkpoint
	// is not resumed against another source by mistake.
	Source string `json:"source"`
	// Next maps a partition to the offset to resume at.
	Next map[string]int64 `json:"next"`
}

// Done reports whether m is before the checkpoint: already settled.
func (c *Checkpoint) Done(m Message) bool {
	if c == nil || c.Next == nil {
		return false
	}
	next, ok := c.Next[m.Partition]
	return ok && m.Offset < next
}

// Checkpointer keeps a replay's checkpoint.
type Checkpointer interface {
	// Load returns the checkpoint saved last, or a zero Checkpoint when there is none.
	Load() (Checkpoint, error)
	// Save keeps c, replacing the one before, atomically.
	Save(c Checkpoint) error
}

// FileCheckpoint keeps a checkpoint in a JSON file, replaced atomically (written
// beside it, synced, then renamed over it).
type FileCheckpoint string

// Load reads the file; a missing file is a zero Checkpoint.
func (f FileCheckpoint) Load() (Checkpoint, error) {
	var c Checkpoint
	b, err := os.ReadFile(string(f))
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("replay: read checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("replay: checkpoint %s is not one a replay wrote: %w", f, err)
	}
	return c, nil
}

// Save writes c.
func (f FileCheckpoint) Save(c Checkpoint) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(string(f)), filepath.Base(string(f))+".*")
	if err != nil {
		return fmt.Errorf("replay: write checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("replay: write checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("replay: write checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("replay: write checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), string(f)); err != nil {
		return fmt.Errorf("replay: write checkpoint: %w", err)
	}
	return nil
}
