package bytecheck_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outboxkit/outbox/internal/bytecheck"
	"github.com/outboxkit/outbox/internal/testkit"
)

// TestJSONFindsEveryBadTextAndNamesItsPath puts each bad text in every
// position of a message (a value, a nested value, an array element, a key)
// and checks the error's path, offset and problem.
func TestJSONFindsEveryBadTextAndNamesItsPath(t *testing.T) {
	t.Parallel()
	for _, bad := range testkit.BadTexts() {
		for _, pos := range []struct {
			doc, path string
			inKey     bool
		}{
			{`{"message_id": "%s", "consumer": "c"}`, "message_id", false},
			{`{"message_id": "m", "consumer": "%s"}`, "consumer", false},
			{`{"m": "x", "intents": [{"kind": "k"}, {"kind": "k", "payload": {"to": [{"email": "a"}, {"email": "%s"}]}}]}`, "intents[1].payload.to[1].email", false},
			{`{"intents": [{"payload": {"%s": 1}}]}`, "intents[0].payload", true},
			{`["a", "b", "%s"]`, "[2]", false},
			{`"%s"`, "", false},
		} {
			doc := strings.Replace(pos.doc, "%s", bad.JSON, 1)
			err := bytecheck.JSON([]byte(doc))
			var be *bytecheck.Error
			if !errors.As(err, &be) {
				t.Errorf("%s in %s: no error", bad.Name, pos.doc)
				continue
			}
			if be.Path != pos.path || be.InKey != pos.inKey || !strings.Contains(be.Problem, bad.Problem) {
				t.Errorf("%s in %s: %+v; want path %q (key %v), problem %q", bad.Name, pos.doc, be, pos.path, pos.inKey, bad.Problem)
			}
			if want := strings.Index(doc, "id-") + 3; be.Offset != want {
				t.Errorf("%s in %s: offset %d, want %d", bad.Name, pos.doc, be.Offset, want)
			}
			if pos.path != "" && !strings.Contains(err.Error(), `"`+pos.path+`"`) {
				t.Errorf("%s: error %q does not name %q", bad.Name, err, pos.path)
			}
			if !utf8.ValidString(err.Error()) {
				t.Errorf("%s: the error text is not valid UTF-8: %q", bad.Name, err)
			}
		}
	}
}

func TestJSONAcceptsGoodText(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"message_id": "order-42", "consumer": "billing"}`,
		`{"text": "caf\u00e9 café 日本 😀 \ud83d\ude00 \uD83D\uDE00 \"quoted\" \\u0000 back\\slash \n"}`,
		`{"a": [1, 2.5e3, true, false, null, {"b": []}], "c": "\u0001 is a control but not NUL"}`,
		`{"replacement char": "\ufffd �"}`,
		``,
		`{"unterminated": "abc`,
		`{"bad escape": "\u12"}`,
	} {
		if err := bytecheck.JSON([]byte(doc)); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestStringRefusesInvalidUTF8AndNUL(t *testing.T) {
	t.Parallel()
	for _, bad := range testkit.BadTexts() {
		if bad.Raw == "" {
			continue
		}
		err := bytecheck.String(bad.Raw)
		var be *bytecheck.Error
		if !errors.As(err, &be) || be.Offset != 3 || !strings.Contains(be.Problem, bad.Problem) {
			t.Errorf("%s: %v; want %s at offset 3", bad.Name, err, bad.Problem)
		}
	}
	for _, good := range []string{"", "order-42", "café 日本 😀", "\ufffd", "tab\tand\nnewline"} {
		if err := bytecheck.String(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}

// FuzzJSONNothingIsRewritten: whatever JSON passes the check decodes
// without a single replacement character that was not in the input, and
// holds no NUL; whatever encoding/json would rewrite is refused.
func FuzzJSONNothingIsRewritten(f *testing.F) {
	for _, bad := range testkit.BadTexts() {
		f.Add(`{"id": "` + bad.JSON + `"}`)
	}
	f.Add(`{"id": "\ud83d\ude00", "k\u00e9": ["\ufffd", "�"]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var v any
		if json.Unmarshal([]byte(doc), &v) != nil {
			return
		}
		if bytecheck.JSON([]byte(doc)) != nil {
			return
		}
		var decoded strings.Builder
		collectStrings(v, &decoded)
		got := decoded.String()
		want := strings.Count(doc, "\ufffd") + strings.Count(strings.ToLower(doc), `\ufffd`)
		if n := strings.Count(got, "\ufffd"); n > want {
			t.Errorf("%q passed the check but decoded with %d replacement characters, %d in the input", doc, n, want)
		}
		if strings.Contains(got, "\x00") {
			t.Errorf("%q passed the check but decoded with a NUL", doc)
		}
	})
}

func collectStrings(v any, out *strings.Builder) {
	switch v := v.(type) {
	case string:
		out.WriteString(v)
	case []any:
		for _, e := range v {
			collectStrings(e, out)
		}
	case map[string]any:
		for k, e := range v {
			out.WriteString(k)
			collectStrings(e, out)
		}
	}
}

// Nesting is bounded: MaxDepth levels pass, one more is refused at once,
// whatever follows (a million '[' cost 115 MB in the decoder before).
func TestJSONNestingIsBounded(t *testing.T) {
	ok := strings.Repeat("[", bytecheck.MaxDepth) + strings.Repeat("]", bytecheck.MaxDepth)
	if err := bytecheck.JSON([]byte(ok)); err != nil {
		t.Fatalf("%d levels: %v", bytecheck.MaxDepth, err)
	}
	deep := `{"intents": [{"payload": ` + strings.Repeat("[", 1<<20)
	err := bytecheck.JSON([]byte(deep))
	var be *bytecheck.Error
	if !errors.As(err, &be) || !be.TooDeep || be.Offset != len(`{"intents": [{"payload": `)+bytecheck.MaxDepth-3 || !strings.Contains(err.Error(), "nested deeper than 64 levels") {
		t.Fatalf("1 MiB of '[' = %v", err)
	}
	if !strings.HasPrefix(be.Path, "intents[0].payload") {
		t.Fatalf("path %q", be.Path)
	}
}

// TestJSONRefusesNumbersJSONBCannotStore: each number PostgreSQL's jsonb
// refuses (checked against the server when the test was written) is
// refused with its path, and each it stores at the edge of numeric's range
// is accepted.
func TestJSONRefusesNumbersJSONBCannotStore(t *testing.T) {
	t.Parallel()
	zeros := func(n int) string { return strings.Repeat("0", n) }
	for _, tc := range []struct {
		number string
		fits   bool
	}{
		{"1e131071", true}, {"9.99e131071", true}, {"0.1e131072", true}, {"1" + zeros(131071), true},
		{"1e-16383", true}, {"5e-16383", true}, {"0.5e-16382", true}, {"1." + zeros(16383), true},
		{"0.0e99999999", true}, {"0e1073741822", true}, {"-12.5E+3", true}, {"1e-0", true},
		{"1e131072", false}, {"1e1000000", false}, {"1E+1000000", false}, {"1" + zeros(131072), false},
		{"1e-16384", false}, {"123456789e-16390", false}, {"1." + zeros(16384), false}, {"0." + zeros(16384), false},
		{"0e-99999", false}, {"-0e-1000000", false}, {"0e1073741823", false}, {"1e99999999999999999999", false},
	} {
		if got := bytecheck.NumberFits([]byte(tc.number)); got != tc.fits {
			t.Errorf("NumberFits(%.30s) = %v, want %v", tc.number, got, tc.fits)
		}
		doc := `{"intents": [{"payload": {"amount": [1, ` + tc.number + `]}}]}`
		err := bytecheck.JSON([]byte(doc))
		var be *bytecheck.Error
		switch {
		case tc.fits && err != nil:
			t.Errorf("%.30s: %v, want it accepted", tc.number, err)
		case !tc.fits && (!errors.As(err, &be) || !be.Number || be.Path != "intents[0].payload.amount[1]" || be.Offset != strings.Index(doc, tc.number)):
			t.Errorf("%.30s: %+v, want a number error at intents[0].payload.amount[1]", tc.number, err)
		case !tc.fits && len(err.Error()) > 250:
			t.Errorf("%.30s: the error quotes the whole number: %d bytes", tc.number, len(err.Error()))
		}
	}
}
