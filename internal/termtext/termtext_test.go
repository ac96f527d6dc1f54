package termtext_test

import (
	"testing"

	"github.com/outboxkit/outbox/internal/termtext"
)

func TestClean(t *testing.T) {
	for _, c := range []struct {
		in, want string
		nl       bool
	}{
		{"plain text, é ü 日本", "plain text, é ü 日本", false},
		{"\x1b[2J\x1b[H fake\a", `\x1b[2J\x1b[H fake\x07`, false},
		{"line1\r\nline2", `line1\x0d\x0aline2`, false},
		{"line1\r\nline2", "line1\\x0d\nline2", true},
		{"tab\there", "tab\there", false},
		{"del\x7f c1\u009b bidi\u202egnp.exe", `del\x7f c1\u009b bidi\u202egnp.exe`, false},
		{"bad \xff utf8", `bad \xff utf8`, false},
	} {
		if got := termtext.Clean(c.in, c.nl); got != c.want {
			t.Errorf("Clean(%q, %v) = %q, want %q", c.in, c.nl, got, c.want)
		}
	}
}
