package idemstore

import (
	"testing"
	"time"
)

func TestStore(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	s := New[string](24 * time.Hour)

	c, got, _ := s.Begin("k", "p1", now)
	if got != Fresh {
		t.Fatalf("first Begin = %v, want Fresh", got)
	}
	if _, got, _ := s.Begin("k", "p1", now); got != InFlight {
		t.Fatalf("Begin while in flight = %v, want InFlight", got)
	}
	c.Finish("answer")
	if _, got, resp := s.Begin("k", "p1", now); got != Saved || resp != "answer" {
		t.Fatalf("repeat = %v %q, want Saved answer", got, resp)
	}
	if _, got, _ := s.Begin("k", "p2", now); got != Mismatch {
		t.Fatalf("other parameters = %v, want Mismatch", got)
	}
	if _, got, _ := s.Begin("k", "p2", now.Add(24*time.Hour)); got != Fresh {
		t.Fatalf("after the retention = %v, want Fresh", got)
	}

	r, _, _ := s.Begin("r", "p", now)
	r.Release()
	if _, got, _ := s.Begin("r", "p", now); got != Fresh {
		t.Fatalf("after Release = %v, want Fresh", got)
	}
	var none *Claim[string]
	none.Finish("x") // nil claims are no-ops
	none.Release()

	forever := New[int](0)
	c2, _, _ := forever.Begin("k", "p", now)
	c2.Finish(1)
	if _, got, _ := forever.Begin("k", "p", now.Add(1000*time.Hour)); got != Saved {
		t.Fatalf("retention 0 forgot the key: %v", got)
	}
}
