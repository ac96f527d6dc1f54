package amqpprovider

import (
	"encoding/json"
	"fmt"
	"strings"
)

// unparseable is what Redact returns for a payload it cannot read.
var unparseable = json.RawMessage(`{"redacted":"unparseable payload"}`)

// sensitiveWords mark header names and body keys whose values Redact masks.
var sensitiveWords = []string{
	"secret", "token", "pass", "pwd", "auth", "key", "credential",
	"session", "cookie", "ssn", "card", "cvv", "cvc", "iban", "account",
	"email", "phone", "mobile", "address", "name", "birth", "dob",
}

const masked = "[redacted]"

func sensitive(name string) bool {
	name = strings.ToLower(name)
	for _, w := range sensitiveWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// redactPublish masks header values and body values (at any depth) whose
// name looks sensitive. A body that is a bare string (a non-JSON content
// type) is replaced by its size: its structure is unknown.
func redactPublish(payload json.RawMessage) json.RawMessage {
	var p Publish
	if err := json.Unmarshal(payload, &p); err != nil {
		return unparseable
	}
	if len(p.Headers) > 0 {
		h := make(map[string]string, len(p.Headers))
		for k, v := range p.Headers {
			if sensitive(k) {
				v = masked
			}
			h[k] = v
		}
		p.Headers = h
	}
	if len(p.Body) > 0 {
		var body any
		if err := json.Unmarshal(p.Body, &body); err != nil {
			return unparseable
		}
		if s, ok := body.(string); ok {
			body = fmt.Sprintf("[redacted %d bytes]", len(s))
		} else {
			body = redactValue(body)
		}
		b, err := json.Marshal(body)
		if err != nil {
			return unparseable
		}
		p.Body = b
	}
	out, err := json.Marshal(p)
	if err != nil {
		return unparseable
	}
	return out
}

func redactValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, inner := range v {
			if sensitive(k) {
				v[k] = masked
			} else {
				v[k] = redactValue(inner)
			}
		}
		return v
	case []any:
		for i, inner := range v {
			v[i] = redactValue(inner)
		}
		return v
	default:
		return v
	}
}
