package intents

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/outboxkit/outbox/internal/bytecheck"
)

// checkPayload checks raw, the JSON of payload v, before anything is
// written. Its bytes first: invalid UTF-8, a NUL (raw or \u0000) or a lone
// surrogate escape is refused, naming the payload field and the byte
// offset, because encoding/json would turn invalid UTF-8 and lone
// surrogates into U+FFFD, changing what the provider is asked to do, and
// PostgreSQL's jsonb refuses NUL. Then its syntax. Last, a value that
// json.Marshal encoded: Marshal itself writes a string's invalid UTF-8 as
// \ufffd, so when raw holds that escape the value's strings are searched
// for the invalid bytes it replaced.
func checkPayload(v any, raw []byte) error {
	if err := bytecheck.JSON(raw); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	if !json.Valid(raw) {
		return errors.New("payload is not valid JSON")
	}
	switch v.(type) {
	case json.RawMessage, []byte:
		return nil
	}
	if !bytes.Contains(raw, []byte(`\ufffd`)) {
		return nil
	}
	if err := findInvalidString(reflect.ValueOf(v), "", 0); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	return nil
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// findInvalidString returns the first string in v, a value json.Marshal
// encoded, holding invalid UTF-8, with its JSON path.
func findInvalidString(v reflect.Value, path string, depth int) error {
	if !v.IsValid() || depth > 64 {
		return nil
	}
	if v.Type().Implements(marshalerType) {
		return nil // its JSON is in raw as it wrote it, and was checked
	}
	if v.Type().Implements(textMarshalerType) && v.CanInterface() && (v.Kind() != reflect.Pointer || !v.IsNil()) {
		if text, err := v.Interface().(encoding.TextMarshaler).MarshalText(); err == nil {
			return invalidAt(string(text), path)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		return invalidAt(v.String(), path)
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return findInvalidString(v.Elem(), path, depth+1)
	case reflect.Struct:
		return invalidInStruct(v, path, depth)
	case reflect.Map:
		return invalidInMap(v, path, depth)
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // base64
		}
		for i := range v.Len() {
			if err := findInvalidString(v.Index(i), fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// invalidAt is bytecheck.String's error for s, at path.
func invalidAt(s, path string) error {
	err := bytecheck.String(s)
	var be *bytecheck.Error
	if errors.As(err, &be) {
		be.Path = path
	}
	return err
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// invalidInStruct looks in the fields json.Marshal encodes, by their JSON
// names.
func invalidInStruct(v reflect.Value, path string, depth int) error {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if err := findInvalidString(v.Field(i), joinPath(path, name), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// invalidInMap looks in the keys (a string key is a JSON name too) and the
// values.
func invalidInMap(v reflect.Value, path string, depth int) error {
	iter := v.MapRange()
	for iter.Next() {
		key := "?"
		if iter.Key().CanInterface() {
			key = fmt.Sprint(iter.Key().Interface())
		}
		if iter.Key().Kind() == reflect.String {
			if err := invalidAt(key, path); err != nil {
				var be *bytecheck.Error
				if errors.As(err, &be) {
					be.InKey = true
				}
				return err
			}
		}
		if err := findInvalidString(iter.Value(), joinPath(path, key), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// checkText reports invalid UTF-8 or a NUL in one of a message's strings,
// naming it.
func checkText(what, s string) error {
	if err := bytecheck.String(s); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidMessage, what, err)
	}
	return nil
}
