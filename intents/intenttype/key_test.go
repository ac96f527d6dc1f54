package intenttype_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// Two different (consumer, message id, name) triples never derive the same
// key, and every key fits (DESIGN.md, invariant 2). The parts are drawn from
// an alphabet rich in the characters that could forge a boundary.
func TestMessageKeysAreInjectiveAndFit(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same triples every run
	const idRunes = "ab:%~7E3A25é"
	draw := func(alphabet string, n int) string {
		r := []rune(alphabet)
		var b strings.Builder
		for range rng.IntN(n + 1) {
			b.WriteRune(r[rng.IntN(len(r))])
		}
		return b.String()
	}
	type triple struct{ consumer, id, name string }
	seen := map[string]triple{}
	check := func(tr triple) {
		k := intenttype.MessageKey(tr.consumer, tr.id, tr.name)
		if len(k) > intenttype.MaxKeyLength || !utf8.ValidString(k) {
			t.Fatalf("key for %+v is %d bytes or invalid UTF-8: %q", tr, len(k), k)
		}
		if other, ok := seen[k]; ok && other != tr {
			t.Fatalf("%+v and %+v both derive %q", tr, other, k)
		}
		seen[k] = tr
	}
	for range 20000 {
		check(triple{"c" + draw("ab.-_", 3), "m" + draw(idRunes, 8), draw("ab.-", 3)})
	}
	// The collisions the issue found, and the longest parts the package
	// accepts: a 100-byte consumer with a 200-byte id of multi-byte
	// characters that escaping inflates.
	check(triple{"orders", "m1", "receipt"})
	check(triple{"orders", "m1:receipt", ""})
	long := strings.Repeat("c", 100)
	check(triple{long, strings.Repeat(":", 200), ""})
	check(triple{long, strings.Repeat(":", 199) + "%", ""})
	check(triple{long, strings.Repeat("é", 100), strings.Repeat("n", 64)})
	check(triple{long, strings.Repeat("é", 100), strings.Repeat("n", 63)})
}

// The key the provider is sent embeds the namespace and generation, fits
// the provider's limit, and differs between generations and namespaces.
func TestProviderKeys(t *testing.T) {
	t.Parallel()
	key := intenttype.MessageKey(strings.Repeat("c", 100), strings.Repeat("x", 200), "")
	seen := map[string]bool{}
	for _, ns := range []string{"aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"} {
		for gen := range 3 {
			for _, limit := range []int{64, 255} {
				k := intenttype.ProviderKey(ns, gen, key, limit)
				max := limit
				if max == 0 {
					max = intenttype.MaxKeyLength
				}
				if len(k) > max || !strings.HasPrefix(k, ns) {
					t.Fatalf("ProviderKey(%s, %d, limit %d) = %q (%d bytes)", ns, gen, limit, k, len(k))
				}
				if seen[k] {
					t.Fatalf("ProviderKey %q derived twice", k)
				}
				seen[k] = true
			}
		}
	}
	if got := intenttype.ProviderKey("ns", 0, "orders:m1", 0); got != "ns.0/orders:m1" {
		t.Fatalf("short key = %q, want it readable as is", got)
	}
}

// Every transition the diagram draws is allowed to its actor, and nothing
// else: an operator never cancels an intent that may have acted, and the
// one way out of a terminal state is an operator's resend of a failed
// intent.
func TestTransitionTable(t *testing.T) {
	t.Parallel()
	if intenttype.CanTransition(intenttype.StateInDoubt, intenttype.StateCancelled, intenttype.ActorOperator) {
		t.Error("an in_doubt intent may have acted: it cannot be cancelled")
	}
	if intenttype.CanTransition(intenttype.StateSucceeded, intenttype.StatePending, intenttype.ActorDispatcher) {
		t.Error("a terminal state has no way out")
	}
	for _, tr := range intenttype.Transitions {
		resendFailed := tr.From == intenttype.StateFailed && tr.To == intenttype.StatePending && tr.By == intenttype.ActorOperator
		if !tr.From.Valid() || !tr.To.Valid() || (tr.From.Terminal() && !resendFailed) {
			t.Errorf("transition %+v leaves a terminal state or names an unknown one", tr)
		}
	}
}
