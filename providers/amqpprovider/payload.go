package amqpprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"strings"

	"github.com/outboxkit/outbox/providers"
)

// Limits from AMQP 0-9-1: names, routing keys and header names are short
// strings of at most 255 bytes.
const (
	// MaxNameLength bounds Publish.Exchange, Publish.RoutingKey and each
	// header name, in bytes.
	MaxNameLength = 255
	// DefaultContentType is Publish.ContentType's default.
	DefaultContentType = "application/json"
)

// Headers Perform sets on every message. A payload may not set them.
const (
	// HeaderIntentID carries the intent's id (an AMQP long integer), so a
	// consumer or an operator can tie a message to the intent that
	// published it.
	HeaderIntentID = "x-outbox-intent-id"
)

// Publish is the payload of a KindPublish intent: one message published to
// an exchange. Build it and json.Marshal it when recording the intent;
// Validate decodes it strictly (unknown fields are errors).
type Publish struct {
	// Exchange is the exchange to publish to; "" is the default exchange,
	// which routes to the queue named by RoutingKey. The exchange must
	// exist: publishing to a missing one fails the intent. At most
	// MaxNameLength bytes.
	Exchange string `json:"exchange,omitempty"`
	// RoutingKey is the message's routing key. Required (with a fanout
	// exchange, which ignores it, any non-empty value will do); at most
	// MaxNameLength bytes.
	RoutingKey string `json:"routing_key"`
	// Body is the message body, any JSON value except null. Required. With
	// a JSON content type (application/json or any type ending in +json)
	// the body is published as its JSON text; with any other content type
	// it must be a JSON string, published as that string's UTF-8 bytes.
	Body json.RawMessage `json:"body"`
	// ContentType is the message's content-type property. Defaults to
	// DefaultContentType.
	ContentType string `json:"content_type,omitempty"`
	// Headers are application headers, published as AMQP strings. Names are
	// 1 to MaxNameLength bytes; HeaderIntentID is reserved.
	Headers map[string]string `json:"headers,omitempty"`
	// Persistent asks the broker to write the message to disk (delivery
	// mode 2), so it survives a broker restart in a durable queue.
	// Defaults to true.
	Persistent *bool `json:"persistent,omitempty"`
}

// decoded is a validated Publish with its defaults applied and its body
// ready to send.
type decoded struct {
	Publish
	body       []byte
	persistent bool
}

func decodePublish(payload json.RawMessage) (*decoded, error) {
	var p Publish
	if err := providers.DecodePayload(KindPublish, payload, &p); err != nil {
		return nil, err
	}
	return p.check()
}

func (p Publish) check() (*decoded, error) {
	bad := func(field, format string, args ...any) error {
		return &providers.PayloadError{Kind: KindPublish, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if len(p.Exchange) > MaxNameLength {
		return nil, bad("exchange", "is %d bytes, more than %d", len(p.Exchange), MaxNameLength)
	}
	if p.RoutingKey == "" {
		return nil, bad("routing_key", "is required")
	}
	if len(p.RoutingKey) > MaxNameLength {
		return nil, bad("routing_key", "is %d bytes, more than %d", len(p.RoutingKey), MaxNameLength)
	}
	body := bytes.TrimSpace(p.Body)
	if len(body) == 0 || bytes.Equal(body, []byte("null")) {
		return nil, bad("body", "is required")
	}
	if p.ContentType == "" {
		p.ContentType = DefaultContentType
	}
	mediaType, _, err := mime.ParseMediaType(p.ContentType)
	if err != nil || strings.ContainsAny(p.ContentType, "\r\n") {
		return nil, bad("content_type", "is not a valid media type")
	}
	out := &decoded{Publish: p, persistent: p.Persistent == nil || *p.Persistent}
	if isJSONType(mediaType) {
		out.body = body
	} else {
		var s string
		if err := json.Unmarshal(body, &s); err != nil {
			return nil, bad("body", "must be a JSON string when content_type %q is not JSON", mediaType)
		}
		out.body = []byte(s)
	}
	for name := range p.Headers {
		switch {
		case name == "":
			return nil, bad("headers", "has an empty header name")
		case len(name) > MaxNameLength:
			return nil, bad("headers", "header name of %d bytes is longer than %d", len(name), MaxNameLength)
		case strings.EqualFold(name, HeaderIntentID):
			return nil, bad("headers."+name, "is reserved: the outbox sets it")
		}
	}
	return out, nil
}

func isJSONType(mediaType string) bool {
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}
