package intentstore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// What a provider returns (a reference, an error message, a header quoted
// in one) reaches text columns only through storable, so that a known
// outcome is never lost to its bytes (DESIGN.md, invariant 14): Postgres
// refuses invalid UTF-8 and NUL in text, and a settlement refused for them
// would leave a confirmed delivery in doubt, or, keyed, be taken over and
// delivered again on every job run.
const (
	// maxRefBytes bounds a provider reference (Stripe's ids are about 30
	// bytes, SendGrid's X-Message-Id 22).
	maxRefBytes = 512
	// maxTextBytes bounds an error, a reason or a note.
	maxTextBytes = 4096
)

// truncatedMark ends a text storable cut.
const truncatedMark = "…[cut]"

// storable returns s as a valid UTF-8 text without NUL and at most limit
// bytes: an invalid byte or a NUL is written as \xNN (so the text says
// what arrived), and a text longer than limit is cut at a character
// boundary and marked. A text that is already storable is returned unchanged.
func storable(s string, limit int) string {
	if len(s) <= limit && utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() <= limit; {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == 0 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	out := b.String()
	if len(out) <= limit {
		return out
	}
	cut := max(limit-len(truncatedMark), 0)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return out[:cut] + truncatedMark
}

// storableSettlement makes every text of st that can come from a provider
// storable.
func storableSettlement(st Settlement) Settlement {
	st.ProviderRef = storable(st.ProviderRef, maxRefBytes)
	st.LastError = storable(st.LastError, maxTextBytes)
	st.Reason = storable(st.Reason, maxTextBytes)
	if st.Outcome != nil {
		o := *st.Outcome
		o.ProviderRef = storable(o.ProviderRef, maxRefBytes)
		o.Error = storable(o.Error, maxTextBytes)
		st.Outcome = &o
	}
	return st
}
