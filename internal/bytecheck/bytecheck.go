// Package bytecheck finds the bytes that must be refused at the door
// (DESIGN.md, "Bytes are checked at the door"): invalid UTF-8, NUL, and in
// JSON the escapes that encoding/json would silently rewrite or that
// PostgreSQL refuses: \u0000 and a lone surrogate such as \ud800, and the
// numbers jsonb cannot store (1e1000000). encoding/json turns invalid UTF-8
// and lone surrogates into U+FFFD, so two different ids would become one;
// jsonb and text refuse NUL, and jsonb a number beyond numeric's range.
// Checking the raw bytes before decoding refuses them instead, naming the
// field, where the database's refusal would name no row of a batch.
package bytecheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxDepth bounds how deeply JSON may nest objects and arrays: a body of
// a million '[' would otherwise cost a frame each here and far more in the
// decoder (115 MB for 1 MiB, measured). No intent, message or API body
// needs more.
const MaxDepth = 64

// Error says where the first bad byte or escape is, or where the JSON
// nests deeper than MaxDepth.
type Error struct {
	// Offset is the problem's byte offset in the checked input.
	Offset int
	// Path is the JSON path of the value holding the problem
	// ("intents[0].payload.to[0].email"), or of the object whose key holds
	// it when InKey; empty for a plain string or the top level.
	Path  string
	InKey bool
	// Problem says what is wrong: "invalid UTF-8 (byte 0xff)", "NUL byte",
	// "NUL escape \u0000", "lone surrogate escape \ud800", "nested
	// deeper than 64 levels", or "number 1e1000000 is beyond ...".
	Problem string
	// TooDeep is set when the problem is the nesting, Number when it is a
	// number jsonb cannot store.
	TooDeep bool
	Number  bool
}

func (e *Error) Error() string {
	where := ""
	switch {
	case e.InKey && e.Path != "":
		where = fmt.Sprintf("a key in field %q: ", e.Path)
	case e.InKey:
		where = "a key: "
	case e.Path != "":
		where = fmt.Sprintf("field %q: ", e.Path)
	}
	if e.TooDeep || e.Number {
		return fmt.Sprintf("%s%s at offset %d", where, e.Problem, e.Offset)
	}
	return fmt.Sprintf("%s%s at offset %d (text must be valid UTF-8 without NUL)", where, e.Problem, e.Offset)
}

// String reports the first invalid UTF-8 sequence or NUL in s.
func String(s string) error {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == 0:
			return &Error{Offset: i, Problem: "NUL byte"}
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return &Error{Offset: i, Problem: invalidUTF8(c)}
			}
			i += size
		}
	}
	return nil
}

// frame is one open object or array on the way to the current value.
type frame struct {
	object  bool
	wantKey bool   // object: the next string is a key
	key     []byte // object: the current member's key, quoted, as in the input (decoded only for an error's path)
	index   int    // array: the current element's index
}

// JSON reports the first invalid UTF-8 sequence, NUL (raw or escaped),
// lone surrogate escape or number jsonb cannot store (NumberFits) in data,
// naming the JSON path of the value that holds it, or nesting deeper than
// MaxDepth. It does not check JSON syntax:
// malformed input is scanned as far as it goes and left for the decoder to
// report.
func JSON(data []byte) error {
	// Most payloads nest a few levels: their stack stays here.
	var frames [8]frame
	stack := frames[:0]
	fail := func(offset int, inKey bool, problem string) error {
		return &Error{Offset: offset, Path: path(stack, inKey), InKey: inKey, Problem: problem}
	}
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == '"':
			inKey := len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].wantKey
			end, offset, problem := scanString(data, i)
			if problem != "" {
				return fail(offset, inKey, problem)
			}
			if inKey {
				top := &stack[len(stack)-1]
				top.key, top.wantKey = data[i:end], false
			}
			i = end
		case c == '{' || c == '[':
			if len(stack) == MaxDepth {
				return &Error{Offset: i, Path: path(stack, false), Problem: fmt.Sprintf("nested deeper than %d levels", MaxDepth), TooDeep: true}
			}
			stack = append(stack, frame{object: c == '{', wantKey: c == '{'})
			i++
		case c == '}' || c == ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			i++
		case c == ',':
			if len(stack) > 0 {
				top := &stack[len(stack)-1]
				if top.object {
					top.wantKey = true
				} else {
					top.index++
				}
			}
			i++
		case c == '-' || c >= '0' && c <= '9':
			// Outside a string, a digit is a number's (or malformed input,
			// which the decoder reports).
			end := numberEnd(data, i)
			if !NumberFits(data[i:end]) {
				err := fail(i, false, fmt.Sprintf("number %s is beyond what PostgreSQL's jsonb stores (at most %d digits before the decimal point and %d after)",
					abbreviate(data[i:end]), maxNumericWeight*4+4, maxNumericScale))
				err.(*Error).Number = true
				return err
			}
			i = end
		case c == 0:
			return fail(i, false, "NUL byte")
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				return fail(i, false, invalidUTF8(c))
			}
			i += size
		}
	}
	return nil
}

// PostgreSQL's numeric, in which jsonb stores numbers, holds digits in
// groups of four: at most 32767 groups of weight (131072 digits before the
// decimal point) and a display scale of 16383 digits after it. Its input
// also refuses an exponent of INT_MAX/2 or beyond, whatever the digits.
const (
	maxNumericWeight   = 32767
	maxNumericScale    = 16383
	maxNumericExponent = 1<<30 - 2
)

// NumberFits reports whether PostgreSQL's jsonb stores the JSON number
// tok, as its numeric input would decide: the digits after the decimal
// point, less the exponent, at most 16383 (even for zero: "0e-20000" is
// refused), and the first digit that is not zero at most 131071 places
// before the decimal point. A token that is not a JSON number fits: the
// decoder reports it.
func NumberFits(tok []byte) bool {
	s := string(tok)
	s = strings.TrimPrefix(s, "-")
	mantissa, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, fracPart, _ := strings.Cut(mantissa, ".")
	exp := int64(0)
	if hasExp {
		var err error
		if exp, err = strconv.ParseInt(strings.TrimPrefix(expText, "+"), 10, 64); err != nil {
			// Beyond int64 is too large; anything else is malformed.
			return !errors.Is(err, strconv.ErrRange)
		}
	}
	if exp > maxNumericExponent || exp < -maxNumericExponent {
		return false
	}
	if int64(len(fracPart))-exp > maxNumericScale {
		return false
	}
	// The place of the first digit that is not zero, from the decimal
	// point: 0 for the units, -1 for the tenths.
	var place int64
	if trimmed := strings.TrimLeft(intPart, "0"); trimmed != "" {
		place = int64(len(trimmed)) - 1
	} else if k := strings.IndexFunc(fracPart, func(r rune) bool { return r != '0' }); k >= 0 {
		place = -int64(k) - 1
	} else {
		return true // zero: any weight
	}
	return floorDiv(place+exp, 4) <= maxNumericWeight
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// numberEnd is where the number token starting at data[i] ends.
func numberEnd(data []byte, i int) int {
	for i < len(data) {
		switch c := data[i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			i++
		default:
			return i
		}
	}
	return i
}

// abbreviate shows at most the first 24 bytes of a number.
func abbreviate(tok []byte) string {
	if len(tok) <= 24 {
		return string(tok)
	}
	return string(tok[:24]) + "..."
}

// scanString scans the JSON string starting with the quote at data[start]
// and returns the offset just past its closing quote, or the offset and
// description of its first problem.
func scanString(data []byte, start int) (end, offset int, problem string) {
	i := start + 1
	for i < len(data) {
		c := data[i]
		switch {
		case c == '"':
			return i + 1, 0, ""
		case c == '\\':
			if i+1 < len(data) && data[i+1] == 'u' {
				v, ok := hex4(data, i+2)
				if !ok {
					i += 2 // malformed: the decoder reports it
					continue
				}
				switch {
				case v == 0:
					return 0, i, `NUL escape \u0000`
				case v >= 0xd800 && v < 0xdc00:
					if i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
						if low, ok := hex4(data, i+8); ok && low >= 0xdc00 && low <= 0xdfff {
							i += 12
							continue
						}
					}
					return 0, i, `lone surrogate escape \` + string(data[i+1:i+6])
				case v >= 0xdc00 && v <= 0xdfff:
					return 0, i, `lone surrogate escape \` + string(data[i+1:i+6])
				}
				i += 6
				continue
			}
			i += 2
		case c == 0:
			return 0, i, "NUL byte"
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, i, invalidUTF8(c)
			}
			i += size
		}
	}
	return len(data), 0, "" // unterminated: the decoder reports it
}

// hex4 parses the four hex digits at data[i:i+4].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(data[i:i+4]), 16, 16)
	return rune(v), err == nil
}

// keyText is the text of a JSON string already scanned clean.
func keyText(quoted []byte) string {
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return strings.Trim(string(quoted), `"`)
	}
	return s
}

// path renders the JSON path of the current value; with inKey, of the
// object whose key is being read.
func path(stack []frame, inKey bool) string {
	var b strings.Builder
	for j, f := range stack {
		if !f.object {
			fmt.Fprintf(&b, "[%d]", f.index)
			continue
		}
		if j == len(stack)-1 && (inKey || f.wantKey) {
			break
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(keyText(f.key))
	}
	return b.String()
}

func invalidUTF8(c byte) string { return fmt.Sprintf("invalid UTF-8 (byte 0x%02x)", c) }
