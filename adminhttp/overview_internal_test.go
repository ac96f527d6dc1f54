package adminhttp

import (
	"testing"
	"time"
)

func TestRelativeAge(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "just now"},
		{-30 * time.Second, "just now"}, // a little clock skew
		{-5 * time.Minute, "in 5 min"},
		{4 * time.Second, "just now"},
		{42 * time.Second, "42 s ago"},
		{3*time.Minute + 59*time.Second, "3 min ago"},
		{90 * time.Minute, "1 h ago"},
		{47 * time.Hour, "47 h ago"},
		{72 * time.Hour, "3 days ago"},
	} {
		if got := relativeAge(now, now.Add(-tc.ago)); got != tc.want {
			t.Errorf("relativeAge(%s ago) = %q, want %q", tc.ago, got, tc.want)
		}
	}
}

func TestCleanControls(t *testing.T) {
	for in, want := range map[string]string{
		"plain <b>text</b>\n\ttab\r\n":         "plain <b>text</b>\n\ttab\r\n",
		"esc\x1b[31m bell\x07 nul\x00":         "esc␛[31m bell␇ nul␀",
		"del\x7f c1\u0085 bad\xff":             "del␡ c1\uFFFD bad\uFFFD",
		"ünïcode ✓":                            "ünïcode ✓",
		"invoice\u202egpj.exe":                 "invoice[U+202E]gpj.exe",
		"\u061c\u200e\u200f\u202a\u2066\u2069": "[U+061C][U+200E][U+200F][U+202A][U+2066][U+2069]",
	} {
		if got := string(cleanControls([]byte(in))); got != want {
			t.Errorf("cleanControls(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[int]int{1: 1, 2: 2, 3: 5, 5: 5, 6: 10, 11: 20, 21: 50, 51: 100, 101: 200} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%d) = %d, want %d", in, got, want)
		}
	}
}
