package chaos

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// The driver's messages reach the package's limits and carry the key's
// special characters, and still derive distinct keys that fit: the suite's
// consistency checks then prove that Consume keeps them apart under fire.
func TestDriverMessagesAreHostileValidAndDistinct(t *testing.T) {
	t.Parallel()
	if len(LongConsumerName) != intents.MaxConsumerLength {
		t.Fatalf("LongConsumerName is %d bytes, want intents.MaxConsumerLength (%d)", len(LongConsumerName), intents.MaxConsumerLength)
	}
	d := newDriver(nil, 3000, rand.New(rand.NewPCG(20261201, 1)))
	seen := map[[2]string]bool{}
	keys := map[string]string{}
	var colon, percent, tilde, maxLen, longConsumer, continued int
	for i, m := range d.msgs {
		if m.id == "" || len(m.id) > intents.MaxMessageIDLength || strings.IndexFunc(m.id, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Fatalf("message %d: id %q is not valid", i, m.id)
		}
		if seen[[2]string{m.consumer, m.id}] {
			t.Fatalf("message %d: (%s, %s) delivered as two messages", i, m.consumer, m.id)
		}
		seen[[2]string{m.consumer, m.id}] = true
		for _, name := range []string{"payment", "receipt"} {
			k := intenttype.MessageKey(m.consumer, m.id, name)
			pk := intenttype.ProviderKey("0123456789abcdef", 0, k, stripeprovider.MaxKeyLength)
			if len(k) > intenttype.MaxKeyLength || len(pk) > stripeprovider.MaxKeyLength {
				t.Fatalf("message %d: key %d bytes, provider key %d bytes", i, len(k), len(pk))
			}
			if other, ok := keys[pk]; ok {
				t.Fatalf("message %d (%s) %s: provider key %q already derived for %s", i, m.id, name, pk, other)
			}
			keys[pk] = m.consumer + "/" + m.id + "/" + name
		}
		colon += b2i(strings.Contains(m.id, ":"))
		percent += b2i(strings.Contains(m.id, "%"))
		tilde += b2i(strings.Contains(m.id, "~"))
		maxLen += b2i(len(m.id) == intents.MaxMessageIDLength)
		longConsumer += b2i(m.consumer == LongConsumerName)
		continued += b2i(i > 0 && m.id == d.msgs[i-1].id+":payment")
	}
	for name, n := range map[string]int{"':'": colon, "'%'": percent, "'~'": tilde, "maximum length": maxLen, "long consumer": longConsumer, "continued ids": continued} {
		if n < 20 {
			t.Errorf("only %d of %d messages with %s", n, len(d.msgs), name)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
