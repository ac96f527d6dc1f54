package effects

import "testing"

func TestTally(t *testing.T) {
	t.Parallel()
	var tally Tally
	tally.Add("1")
	tally.Add("2")
	tally.Add("2")
	tally.Add("")
	if got := tally.For(2); got != 2 {
		t.Fatalf("For(2) = %d, want 2", got)
	}
	if got := tally.For(3); got != 0 {
		t.Fatalf("For(3) = %d, want 0", got)
	}
	if got := tally.Duplicates(); got != 1 {
		t.Fatalf("Duplicates() = %d, want 1", got)
	}
	if got := tally.Snapshot(); len(got) != 2 {
		t.Fatalf("Snapshot() = %v, want two intents", got)
	}
}
