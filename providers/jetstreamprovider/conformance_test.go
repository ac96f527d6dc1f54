package jetstreamprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/jetstreamprovider"
	"github.com/outboxkit/outbox/providers/providertest"
)

// conformanceWindow is the keyed harness's key window and every
// conformance stream's duplicate window: the key window a provider
// declares is only true if the streams keep ids that long.
const conformanceWindow = 10 * time.Minute

// streamDouble is a throwaway stream on the real server, standing where
// the HTTP adapters have a double: it captures every subject under its
// prefix, and every message it stored is an effect, tied to its intent by
// the IntentIDHeader header.
type streamDouble struct {
	t      *testing.T
	stream jetstream.Stream
	prefix string
}

func newStreamDouble(t *testing.T) *streamDouble {
	t.Helper()
	_, js := testkit.NATS(t)
	stream, prefix := testkit.Stream(t, js, jetstream.StreamConfig{Duplicates: conformanceWindow})
	return &streamDouble{t: t, stream: stream, prefix: prefix}
}

func (d *streamDouble) URL() string { return testkit.NATSURL() }

// EffectsFor reads every message the stream holds. A message is stored
// before its PubAck is sent, so the count is exact once Perform has
// returned.
func (d *streamDouble) EffectsFor(intentID int64) int {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := d.stream.Info(ctx)
	if err != nil {
		d.t.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs == 0 {
		return 0
	}
	want, n := strconv.FormatInt(intentID, 10), 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := d.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			d.t.Fatalf("get message %d: %v", seq, err)
		}
		if msg.Header.Get(jetstreamprovider.IntentIDHeader) == want {
			n++
		}
	}
	return n
}

// conformancePayload is a message to subject whose data and headers hold
// values Redact must hide.
func conformancePayload(subject string, data string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"subject":%q,"data":%s,
		"headers":{"Authorization":"Bearer tok_conformance_secret","X-Trace":"t-1"}}`, subject, data))
}

const conformanceData = `{"order":"o-42","customer_email":"jane.doe@example.com"}`

// harness is the suite's harness for a provider keyed with
// conformanceWindow, or declaring no keys.
func harness(t *testing.T, keyed bool) providertest.Harness {
	t.Helper()
	// A stream that takes no message over 64 bytes: the server refuses
	// the rejected payload with an API error, for good.
	_, js := testkit.NATS(t)
	_, small := testkit.Stream(t, js, jetstream.StreamConfig{MaxMsgSize: 64})
	cfg := jetstreamprovider.Config{}
	if keyed {
		cfg.KeyWindow = conformanceWindow
	}
	return providertest.Harness{
		NewDouble: func(t *testing.T) providertest.Double { return newStreamDouble(t) },
		NewProvider: func(t *testing.T, url string) providers.Provider {
			cfg := cfg
			cfg.URL = url
			return newProvider(t, cfg)
		},
		Unreachable: "nats://127.0.0.1:1",
		// NATS answers no HTTP, and a stream cannot be searched by
		// header; a lost PubAck and a connection closed under a request
		// are this package's own tests.
		Features:     providertest.Features{RejectsPayload: true},
		Kind:         jetstreamprovider.KindPublish,
		ValidPayload: conformancePayload("outboxtest.conformance.orders", conformanceData),
		ValidPayloadFor: func(d providertest.Double) json.RawMessage {
			return conformancePayload(d.(*streamDouble).prefix+".orders", conformanceData)
		},
		InvalidPayloads: map[string]string{
			`{"data": 1}`:                                                         "subject",
			`{"subject": "", "data": 1}`:                                          "subject",
			`{"subject": 5, "data": 1}`:                                           "subject",
			`{"subject": "a.*", "data": 1}`:                                       "subject",
			`{"subject": "a.>", "data": 1}`:                                       "subject",
			`{"subject": "a..b", "data": 1}`:                                      "subject",
			`{"subject": "a b", "data": 1}`:                                       "subject",
			`{"subject": "a.b"}`:                                                  "data",
			`{"subject": "a.b", "data": null}`:                                    "data",
			`{"subject": "a.b", "data": 1, "x": 1}`:                               "x",
			`{"subject": "a.b", "data": 1, "headers": []}`:                        "headers",
			`{"subject": "a.b", "data": 1, "headers": {"n": 1}}`:                  "headers",
			`{"subject": "a.b", "data": 1, "headers": {"Nats-Msg-Id": "x"}}`:      "headers.Nats-Msg-Id",
			`{"subject": "a.b", "data": 1, "headers": {"Outbox-Intent-Id": "1"}}`: "headers.Outbox-Intent-Id",
			`{"subject": "a.b", "data": 1, "headers": {"bad name": "1"}}`:         "headers.bad name",
			`{"subject": "a.b", "data": 1, "headers": {"X-Trace": "a\r\nb"}}`:     "headers.X-Trace",
		},
		RejectedPayload: conformancePayload(small+".orders", `"`+strings.Repeat("x", 200)+`"`),
		SensitiveValues: []string{"jane.doe@example.com", "tok_conformance_secret"},
	}
}

func TestConformanceKeyed(t *testing.T) {
	t.Parallel()
	providertest.Run(t, harness(t, true))
}

func TestConformanceUnkeyed(t *testing.T) {
	t.Parallel()
	providertest.Run(t, harness(t, false))
}
