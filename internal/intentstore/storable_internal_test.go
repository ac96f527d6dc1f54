package intentstore

import (
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestStorableKeepsWhatIsAlreadyStorable(t *testing.T) {
	for _, s := range []string{"", "pi_123", "re_ü€𝄞", strings.Repeat("a", maxRefBytes)} {
		if got := storable(s, maxRefBytes); got != s {
			t.Errorf("storable(%q) = %q", s, got)
		}
	}
	if got := storable("ref-\xff\x00-end", maxRefBytes); got != `ref-\xff\x00-end` {
		t.Errorf("storable of invalid bytes = %q", got)
	}
}

// Whatever bytes a provider answers, storable's text is valid UTF-8, has
// no NUL, fits max, and is s itself when s already was all of that.
func TestStorableFitsAnyBytes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := string(rapid.SliceOfN(rapid.Byte(), 0, 3000).Draw(t, "bytes"))
		max := rapid.IntRange(len(truncatedMark)+4, 2048).Draw(t, "max")
		got := storable(s, max)
		if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || len(got) > max {
			t.Fatalf("storable(%q, %d) = %q (%d bytes)", s, max, got, len(got))
		}
		if len(s) <= max && utf8.ValidString(s) && !strings.ContainsRune(s, 0) && got != s {
			t.Fatalf("storable changed a storable text %q into %q", s, got)
		}
	})
}
