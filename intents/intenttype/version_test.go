package intenttype_test

import (
	"encoding/json"
	"testing"

	"github.com/outboxkit/outbox/intents/intenttype"
)

func TestVersionRoundTrips(t *testing.T) {
	v := intenttype.Version{KeyGeneration: 2, AttemptCount: 7}
	if got, err := intenttype.ParseVersion(v.String()); err != nil || got != v {
		t.Fatalf("ParseVersion(%q) = %v, %v", v.String(), got, err)
	}
	b, err := json.Marshal(map[string]intenttype.Version{"v": v})
	if err != nil || string(b) != `{"v":"g2.a7"}` {
		t.Fatalf("JSON %s, %v", b, err)
	}
	var back map[string]intenttype.Version
	if err := json.Unmarshal(b, &back); err != nil || back["v"] != v {
		t.Fatalf("JSON back %v, %v", back, err)
	}
	for _, bad := range []string{"", "2.7", "g2", "g-1.a0", "gx.a1", "g1.a", "g1.a2.3"} {
		if _, err := intenttype.ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
}
