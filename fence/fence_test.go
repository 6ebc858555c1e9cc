package fence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/idemkit/idemkit/fence"
	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Run(m) }

func TestFencedWrites(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	tbl := fence.Table{Name: fmt.Sprintf("idemkit_test_fence_%d", rand.N(1<<30))}
	if err := tbl.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE " + tbl.Name) })
	steps := []struct {
		fence int64
		value string
		stale bool
	}{
		{1, "first", false},
		{1, "same fence again", true},
		{3, "taken over", false},
		{2, "zombie", true},
		{4, "retry", false},
	}
	for _, s := range steps {
		err := tbl.Write(ctx, db, "order-1", s.fence, []byte(s.value))
		if s.stale != errors.Is(err, fence.ErrStale) || (!s.stale && err != nil) {
			t.Fatalf("write fence %d: %v (stale expected: %v)", s.fence, err, s.stale)
		}
	}
	v, f, writes, found, err := tbl.Read(ctx, db, "order-1")
	if err != nil || !found || string(v) != "retry" || f != 4 || writes != 3 {
		t.Fatalf("read: %q fence %d writes %d found %v err %v", v, f, writes, found, err)
	}
	if _, _, _, found, err := tbl.Read(ctx, db, "never"); found || err != nil {
		t.Fatalf("read of a missing key: %v %v", found, err)
	}
	if err := (fence.Table{Name: "x; DROP TABLE y"}).Create(ctx, db); err == nil {
		t.Fatal("an unsafe table name was accepted")
	}
}
