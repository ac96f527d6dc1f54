package jetstreamprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/outboxkit/outbox/providers"
)

// Payload is the payload of a KindPublish intent.
type Payload struct {
	// Subject is the subject to publish to: dot-separated tokens, no
	// wildcards ('*', '>'), no whitespace. Required.
	Subject string `json:"subject"`
	// Data is any JSON value (not null); the message's body is its compact
	// JSON encoding, so a JSON string is published with its quotes.
	// Required.
	Data json.RawMessage `json:"data"`
	// Headers are extra message headers. Names starting with "Nats-" are
	// reserved for the server and IntentIDHeader for the provider.
	// Optional.
	Headers map[string]string `json:"headers,omitempty"`
}

// decodePayload decodes and checks a KindPublish payload; errors are
// *providers.PayloadError naming the field.
func decodePayload(raw json.RawMessage) (Payload, []byte, error) {
	var p Payload
	if err := providers.DecodePayload(KindPublish, raw, &p); err != nil {
		return Payload{}, nil, err
	}
	if err := checkSubject(p.Subject); err != nil {
		return Payload{}, nil, payloadError("subject", err.Error())
	}
	trimmed := bytes.TrimSpace(p.Data)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return Payload{}, nil, payloadError("data", "is required (any JSON value but null)")
	}
	var body bytes.Buffer
	if err := json.Compact(&body, trimmed); err != nil {
		return Payload{}, nil, payloadError("data", "is not valid JSON")
	}
	for _, name := range sortedKeys(p.Headers) {
		field := "headers." + name
		if err := checkHeaderName(name); err != nil {
			return Payload{}, nil, payloadError(field, err.Error())
		}
		if strings.ContainsAny(p.Headers[name], "\r\n") {
			return Payload{}, nil, payloadError(field, "must not contain a line break")
		}
	}
	return p, body.Bytes(), nil
}

// checkSubject enforces NATS's rules for a subject one may publish to.
func checkSubject(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("is required")
	case strings.IndexFunc(s, unicode.IsSpace) >= 0:
		return fmt.Errorf("must not contain whitespace")
	}
	for _, token := range strings.Split(s, ".") {
		switch token {
		case "":
			return fmt.Errorf("must not have an empty token (a leading, trailing or double '.')")
		case "*", ">":
			return fmt.Errorf("must not contain wildcards: a message is published to one subject")
		}
	}
	return nil
}

func checkHeaderName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("header name is empty")
	case strings.HasPrefix(strings.ToLower(name), "nats-"):
		return fmt.Errorf("headers starting with Nats- are reserved for the server (Nats-Msg-Id is the intent's idempotency key)")
	case strings.EqualFold(name, IntentIDHeader):
		return fmt.Errorf("%s is set by the provider", IntentIDHeader)
	}
	for _, r := range name {
		if r <= ' ' || r == ':' || r >= 0x7f {
			return fmt.Errorf("header name must be printable ASCII without spaces or ':'")
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// sensitiveHeaderWords mark header names whose values Redact masks.
var sensitiveHeaderWords = []string{
	"secret", "token", "pass", "pwd", "auth", "key", "credential",
	"session", "cookie", "signature", "email", "phone",
}

func sensitiveHeader(name string) bool {
	lower := strings.ToLower(name)
	for _, w := range sensitiveHeaderWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

// unparseable is what Redact returns for a payload it cannot read.
var unparseable = json.RawMessage(`{"redacted":"unparseable payload"}`)

func redactPayload(raw json.RawMessage) json.RawMessage {
	var p Payload
	if err := json.Unmarshal(raw, &p); err != nil {
		return unparseable
	}
	out := struct {
		Subject string            `json:"subject"`
		Data    string            `json:"data"`
		Headers map[string]string `json:"headers,omitempty"`
	}{Subject: p.Subject, Data: fmt.Sprintf("[redacted %d bytes]", len(bytes.TrimSpace(p.Data)))}
	if len(p.Headers) > 0 {
		out.Headers = make(map[string]string, len(p.Headers))
		for k, v := range p.Headers {
			if sensitiveHeader(k) {
				v = "[redacted]"
			}
			out.Headers[k] = v
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return unparseable
	}
	return b
}

func payloadError(field, reason string) error {
	return &providers.PayloadError{Kind: KindPublish, Field: field, Reason: reason}
}
