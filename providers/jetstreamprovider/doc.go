// Package jetstreamprovider is the outbox's adapter for publishing to NATS
// JetStream, built on nats.go's jetstream package. It performs intents of
// kind KindPublish, whose payload is a Payload: a subject, JSON data and
// optional headers.
//
// # Idempotency: the stream's duplicate window is the key window
//
// Every publish carries the intent's idempotency key as the Nats-Msg-Id
// header and the intent's id as the Outbox-Intent-Id header (IntentIDHeader).
// JetStream drops a message whose Nats-Msg-Id it has already stored within
// the stream's duplicate window and answers with the first message's
// sequence and Duplicate set: Perform reports that as a success with
// Replayed true. Past the window a repeat is stored again, so the
// provider's key window is the stream's duplicate window:
//
//   - Config.KeyWindow, when set, is declared as is: the operator asserts
//     that the target streams keep ids at least that long.
//   - Otherwise, when Config.Stream is set, New reads that stream's
//     duplicate window from the server (so New needs the server reachable)
//     and every publish expects that stream (a subject stored by another
//     stream fails instead of silently using another window).
//   - A stream without a duplicate window, or a Config with neither Stream
//     nor KeyWindow, declares no idempotency keys: New logs a warning and the
//     dispatcher then commits a write-ahead attempt before each publish and
//     holds any ambiguous one in_doubt. The Nats-Msg-Id header is still sent.
//
// Capabilities are fixed at New and never change, because the dispatcher
// reads them on every attempt: a provider that switched from keyed to
// unkeyed mid-flight would be hard to reason about. The dispatcher measures
// the window from the intent's creation, less a margin of at most half the
// window (dispatcher.Config.KeyWindowMargin), so with JetStream's default of
// two minutes a retry is protected only during the first minute: give
// streams that receive outbox publishes a longer duplicate window (an hour
// or more) if retries may be spread further apart.
//
// # Outcomes
//
//   - PubAck: succeeded, ProviderRef "stream:sequence", Replayed when the
//     stream reported a duplicate.
//   - Not connected when the publish was to be made (the server is down,
//     the connection reconnecting or closed: nothing is handed to nats.go),
//     no responders (no stream listens on the subject: nothing was
//     stored), an API error of class 5xx (the stream refused to store it for
//     now): retry.
//   - Any other API error (wrong expected stream, message too large, ...),
//     a message over the server's max_payload: failed, with the server's
//     description.
//   - No PubAck in time, an undecodable one, or the connection closed,
//     draining or reconnecting while the request was out (nats.go answers a
//     request already written with the same ErrConnectionClosed as one
//     never sent, so it proves nothing): the stream may have stored
//     the message. Retry when keyed (the Nats-Msg-Id makes the repeat a
//     duplicate within the window), ambiguous otherwise.
//
// The connection never buffers publishes while reconnecting
// (nats.ReconnectBufSize(-1)), so a publish made while the server is away
// fails at once and is retried by the dispatcher instead of being sent
// later, after the attempt has been given up. JetStream cannot be searched
// by header, so the provider cannot reconcile: Reconcile returns
// providers.ErrReconcileUnsupported.
//
// The URL may embed credentials; they never appear in logs, errors or the
// output of fmt on Config or Provider.
package jetstreamprovider
