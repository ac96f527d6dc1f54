// Package termtext makes text from providers and users safe to print on a
// terminal. A provider's error body, an event's reason or a payload field
// may hold escape sequences (ESC [ 2 J clears the screen), a BEL, a
// carriage return that overwrites a line, or a Unicode bidi override that
// reorders what the operator reads. Every human-readable printer of the
// CLI passes such strings through Clean; JSON output needs no such care:
// encoding/json escapes control characters.
package termtext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Clean returns s with every character that could steer a terminal shown
// visibly instead: C0 controls (except tab and, when keepNewlines, newline)
// and DEL as \xNN, C1 controls as \u00NN, the Unicode bidi controls
// (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C) as \uNNNN, and
// invalid UTF-8 bytes as \xNN. Everything else is kept as is.
func Clean(s string, keepNewlines bool) string {
	if safe(s, keepNewlines) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r, keepNewlines):
			if r < 0x80 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Line is Clean without newlines: for one table cell or one line.
func Line(s string) string { return Clean(s, false) }

func safe(s string, keepNewlines bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unsafeRune(r, keepNewlines) {
			return false
		}
	}
	return true
}

func unsafeRune(r rune, keepNewlines bool) bool {
	switch {
	case r == '\t', r == '\n' && keepNewlines:
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case BidiControl(r):
		return true
	}
	return false
}

// BidiControl reports whether r is in Unicode's Bidi_Control set (U+061C,
// U+200E, U+200F, U+202A-U+202E, U+2066-U+2069): characters that reorder
// the text around them, so that "txt.exe" can read as "exe.txt".
func BidiControl(r rune) bool {
	return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f || r == 0x061c
}
