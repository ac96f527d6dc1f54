package webhookprovider

import (
	"encoding/json"
	"net/mail"
	"strings"
	"unicode/utf8"
)

const redactedValue = "[redacted]"

// Redact returns a copy of payload for display. The endpoint and event are
// kept; inside data, the value of every key that mentions email, phone,
// token, secret, password, card, iban or ssn is replaced by "[redacted]",
// and every other string that is an email address is masked to its first
// character and domain ("j***@example.com"). A payload that is not a JSON
// object becomes {"redacted":"unparseable payload"}. Redact never fails and
// does not validate.
func (p *Provider) Redact(kind string, payload json.RawMessage) json.RawMessage {
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil || m == nil {
		return json.RawMessage(`{"redacted":"unparseable payload"}`)
	}
	if d, ok := m["data"]; ok {
		m["data"] = redactValue(d)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return json.RawMessage(`{"redacted":"unparseable payload"}`)
	}
	return out
}

func redactValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, inner := range v {
			if sensitiveKey(k) && inner != nil {
				v[k] = redactedValue
				continue
			}
			v[k] = redactValue(inner)
		}
		return v
	case []any:
		for i, inner := range v {
			v[i] = redactValue(inner)
		}
		return v
	case string:
		if looksLikeEmail(v) {
			return maskEmail(v)
		}
		return v
	default:
		return v
	}
}

func sensitiveKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"email", "phone", "token", "secret", "password", "card", "iban", "ssn"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

func looksLikeEmail(s string) bool {
	if !strings.Contains(s, "@") {
		return false
	}
	a, err := mail.ParseAddress(s)
	return err == nil && a.Address != ""
}

func maskEmail(s string) string {
	a, err := mail.ParseAddress(s)
	if err != nil {
		return redactedValue
	}
	at := strings.LastIndexByte(a.Address, '@')
	if at <= 0 {
		return redactedValue
	}
	_, n := utf8.DecodeRuneInString(a.Address)
	return a.Address[:n] + "***" + a.Address[at:]
}
