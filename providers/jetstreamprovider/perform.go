package jetstreamprovider

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/providers"
)

// Perform publishes the payload's message once, with the intent's key as
// Nats-Msg-Id and its id in IntentIDHeader, and waits for the stream's
// PubAck for at most Config.Timeout. It does not retry (nats.go's retry on
// no responders is turned off): the dispatcher owns the schedule. See the
// package doc for how each answer is classified.
func (p *Provider) Perform(ctx context.Context, req providers.Request) (providers.Result, error) {
	if req.Kind != KindPublish {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "unknown kind " + strconv.Quote(req.Kind), Err: providers.UnknownKindError(req.Kind)}
	}
	payload, body, err := decodePayload(req.Payload)
	if err != nil {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: err.Error(), Err: err}
	}
	if req.IdempotencyKey == "" {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "the request has no idempotency key to send as Nats-Msg-Id"}
	}
	if providers.ContextEndedBeforeCall(ctx) {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeRetry, Message: "the attempt's context ended before publishing", Err: ctx.Err()}
	}

	msg := nats.NewMsg(payload.Subject)
	msg.Data = body
	for name, value := range payload.Headers {
		msg.Header.Set(name, value)
	}
	msg.Header.Set(IntentIDHeader, strconv.FormatInt(req.IntentID, 10))
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(req.IdempotencyKey), jetstream.WithRetryAttempts(0)}
	if p.cfg.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(p.cfg.Stream))
	}

	if !p.nc.IsConnected() {
		// Not sent, and known not sent: nothing was handed to nats.go.
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeRetry, Code: "not_connected", DidNotAct: true,
			Message: "not connected to the NATS server " + RedactURL(p.cfg.URL) + ": the message was not sent"}
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	ack, err := p.js.PublishMsg(callCtx, msg, opts...)
	if err != nil {
		return providers.Result{}, p.classify(payload.Subject, err)
	}
	return providers.Result{ProviderRef: fmt.Sprintf("%s:%d", ack.Stream, ack.Sequence), Replayed: ack.Duplicate}, nil
}

// classify turns a failed publish into an AttemptError.
func (p *Provider) classify(subject string, err error) *providers.AttemptError {
	err = scrubErr(err, p.secrets)
	keyed := p.caps.IdempotencyKeys
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		// The server had no subscriber for the subject: nothing stored it.
		// Transient during a stream's leader election; a lasting one is a
		// subject no stream captures, which ends failed when the
		// dispatcher's attempts run out, with this message.
		return &providers.AttemptError{Outcome: providers.OutcomeRetry, Code: "no_responders",
			Message: fmt.Sprintf("no JetStream stream answered for subject %q: check that a stream captures it", subject), Err: err}
	case errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrInvalidConnection), errors.Is(err, nats.ErrNoServers):
		// Refused before anything was written (no reconnect buffer: see
		// New). A closed, draining or reconnecting connection is not
		// among these: nats.go answers a request already written the same
		// way when the connection goes under it (below).
		return &providers.AttemptError{Outcome: providers.OutcomeRetry, Code: "not_connected", DidNotAct: true,
			Message: "not connected to the NATS server " + RedactURL(p.cfg.URL) + ": the message was not sent", Err: err}
	case errors.Is(err, nats.ErrMaxPayload):
		return &providers.AttemptError{Outcome: providers.OutcomeFailed, Code: "max_payload",
			Message: "the message is larger than the server's max_payload", Err: err}
	case errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrBadHeaderMsg):
		return &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: err.Error(), Err: err}
	case errors.As(err, &apiErr):
		// The stream answered and did not store the message.
		outcome := providers.OutcomeFailed
		if apiErr.Code >= 500 {
			outcome = providers.OutcomeRetry
		}
		return &providers.AttemptError{Outcome: outcome, HTTPStatus: apiErr.Code,
			Code: strconv.Itoa(int(apiErr.ErrorCode)), Message: apiErr.Description, Err: err}
	}
	// No PubAck in time, an undecodable one, or a connection closed,
	// draining or reconnecting while the request was out (nats.go says
	// ErrConnectionClosed for a request already written, DESIGN.md
	// invariant 13): the stream may have stored the message.
	if keyed {
		return &providers.AttemptError{Outcome: providers.OutcomeRetry,
			Message: "no PubAck: the stream may have stored the message; a retry with the same Nats-Msg-Id is dropped as a duplicate within the stream's duplicate window", Err: err}
	}
	return &providers.AttemptError{Outcome: providers.OutcomeAmbiguous,
		Message: "no PubAck: the stream may have stored the message and has no duplicate window to make a retry safe", Err: err}
}
