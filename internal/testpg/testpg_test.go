package testpg_test

import (
	"context"
	"github.com/idemkit/idemkit/internal/testpg"
	"testing"
)

func TestPool(t *testing.T) {
	t.Parallel()
	p := testpg.Pool(t)
	var s string
	if err := p.QueryRow(context.Background(), "select current_schema()").Scan(&s); err != nil {
		t.Fatal(err)
	}
	t.Log(s)
	if len(s) < 9 {
		t.Fatalf("got %q", s)
	}
}
