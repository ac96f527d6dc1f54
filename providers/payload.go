package providers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// DecodePayload decodes a JSON payload strictly into dst: unknown fields,
// values of the wrong type, trailing data and anything that is not a JSON
// object are reported as a *PayloadError naming the field. Adapters use it in
// Validate and Perform so both read a payload the same way.
func DecodePayload(kind string, payload json.RawMessage, dst any) error {
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return &PayloadError{Kind: kind, Reason: "must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return payloadDecodeError(kind, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &PayloadError{Kind: kind, Reason: "unexpected data after the JSON object"}
	}
	return nil
}

func payloadDecodeError(kind string, err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return &PayloadError{Kind: kind, Field: typeErr.Field, Reason: "must be " + jsonTypeName(typeErr.Type.Kind().String()) + ", not " + typeErr.Value}
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return &PayloadError{Kind: kind, Reason: "malformed JSON: " + syntaxErr.Error()}
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &PayloadError{Kind: kind, Field: strings.Trim(field, `"`), Reason: "unknown field"}
	}
	return &PayloadError{Kind: kind, Reason: err.Error()}
}

func jsonTypeName(goKind string) string {
	switch goKind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	default:
		return "a " + goKind
	}
}
