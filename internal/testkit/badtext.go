package testkit

// BadText is a text every door must refuse (DESIGN.md, "Bytes are checked
// at the door"), with how it is written inside a JSON string literal.
type BadText struct {
	Name string
	// JSON is the text as it appears between the quotes of a JSON string:
	// raw bytes, or an escape encoding/json would rewrite or PostgreSQL
	// refuses.
	JSON string
	// Raw is the text itself when it can be given as bytes (a flag, a
	// query parameter, a Go string); empty for escapes with no byte form
	// (a lone surrogate).
	Raw string
	// Problem is what the error says about it.
	Problem string
}

// BadTexts returns one of each kind of text the doors refuse. Each starts
// with "id-" so that, rewritten, it would still look like an id.
func BadTexts() []BadText {
	return []BadText{
		{"invalid byte 0xff", "id-\xff", "id-\xff", "invalid UTF-8"},
		{"invalid byte 0xfe", "id-\xfe", "id-\xfe", "invalid UTF-8"},
		{"truncated sequence", "id-\xc3", "id-\xc3", "invalid UTF-8"},
		{"overlong slash", "id-\xc0\xaf", "id-\xc0\xaf", "invalid UTF-8"},
		{"encoded surrogate", "id-\xed\xa0\x80", "id-\xed\xa0\x80", "invalid UTF-8"},
		{"beyond U+10FFFF", "id-\xf4\x90\x80\x80", "id-\xf4\x90\x80\x80", "invalid UTF-8"},
		{"raw NUL", "id-\x00", "id-\x00", "NUL"},
		{"NUL escape", `id-\u0000`, "id-\x00", "NUL"},
		{"lone high surrogate", `id-\ud800`, "", "lone surrogate"},
		{"lone low surrogate", `id-\uDC00`, "", "lone surrogate"},
		{"high surrogate then a letter", `id-\ud800\u0041`, "", "lone surrogate"},
		{"two high surrogates", `id-\ud83d\ud83d`, "", "lone surrogate"},
	}
}
