package stripeprovider

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Redact returns a copy of payload, of any of the provider's kinds, for
// display: receipt_email keeps its
// first character and domain ("j***@example.com"), payment_method keeps its
// prefix and last four characters ("pm_***4242"), and metadata values whose
// key mentions email, phone, token, secret or card are replaced. A payload
// that is not a JSON object becomes {"redacted":"unparseable payload"}.
// Redact never fails and does not validate.
func (p *Provider) Redact(kind string, payload json.RawMessage) json.RawMessage {
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil || m == nil {
		return json.RawMessage(`{"redacted":"unparseable payload"}`)
	}
	if v, ok := m["receipt_email"]; ok && v != nil {
		s, _ := v.(string)
		m["receipt_email"] = maskEmail(s)
	}
	if v, ok := m["payment_method"]; ok && v != nil {
		s, _ := v.(string)
		m["payment_method"] = maskID(s)
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		for k, v := range md {
			if sensitiveKey(k) && v != nil {
				md[k] = redactedValue
			}
		}
	} else if v, ok := m["metadata"]; ok && v != nil {
		m["metadata"] = redactedValue
	}
	out, err := json.Marshal(m)
	if err != nil {
		return json.RawMessage(`{"redacted":"unparseable payload"}`)
	}
	return out
}

func sensitiveKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"email", "phone", "token", "secret", "card"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

func maskEmail(s string) string {
	at := strings.LastIndexByte(s, '@')
	if at <= 0 {
		return redactedValue
	}
	_, n := utf8.DecodeRuneInString(s)
	return s[:n] + "***" + s[at:]
}

func maskID(s string) string {
	prefix := ""
	if i := strings.IndexByte(s, '_'); i >= 0 && i <= 4 {
		prefix = s[:i+1]
	}
	rest := s[len(prefix):]
	if len(rest) <= 4 {
		return prefix + "***"
	}
	return prefix + "***" + rest[len(rest)-4:]
}

const redactedValue = "[redacted]"
