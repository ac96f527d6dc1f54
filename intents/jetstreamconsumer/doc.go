// Package jetstreamconsumer feeds a durable NATS JetStream pull consumer
// into intents.Client.Consume, so that each message is handled once per
// consumer however often JetStream delivers it, and is acknowledged only
// after its transaction commits.
//
// # Message ids
//
// A message's id is its Nats-Msg-Id header, the id its publisher gave it
// (jetstreamprovider sets it to the intent's idempotency key). A message
// without one, or with one intents refuses (over intents.MaxMessageIDLength
// bytes, or not printable), is never processed: it is terminated (Term, so
// JetStream never redelivers it) and logged at error level with its stream
// sequence. JetStream drops a repeated Nats-Msg-Id only within the stream's
// duplicate window; the processed marker catches the copies published
// after it, and every redelivery.
//
// # Acknowledgement
//
// For each message Run calls intents.Client.Consume with the Handler. Then:
//
//   - committed, or a duplicate (already processed; the handler did not
//     run): DoubleAck, which waits for the server to confirm the ack. An
//     ack lost after the commit (the connection dropped, the process died)
//     only means JetStream redelivers the message after AckWait; that
//     delivery is a duplicate and is acknowledged with no effect;
//   - the handler failed (or panicked, or an intent was refused): nothing
//     was written. The message is negatively acknowledged with a delay that
//     doubles with each delivery (RedeliveryDelay up to RedeliveryDelayMax)
//     until it has been delivered MaxDeliver times. On that last delivery it
//     is terminated instead and logged at error level: JetStream will not
//     deliver it again. The server enforces MaxDeliver too (the consumer is
//     created with it), so a message whose handler hangs past AckWait or
//     whose process dies stops after MaxDeliver deliveries as well; the
//     server then publishes a $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES
//     advisory.
//
// Messages are handled concurrently (Concurrency at a time), so they may
// complete out of order, and a redelivery comes after later messages.
//
// A handler runs with a context that Run's cancellation does not reach but
// that ends after AckWait, when JetStream would redeliver the message
// anyway. A handler that outlives AckWait is safe (the redelivery waits on
// the processed marker and then finds a duplicate) but wasted.
//
// # Connection
//
// Run connects, creates or updates the durable consumer on Stream (explicit
// acks, AckWait, MaxDeliver, FilterSubject) and pulls with Concurrency
// workers. A server that cannot be reached, a stream that does not exist or
// a consumer that cannot be created is logged and retried with exponential
// backoff (ReconnectDelay up to ReconnectDelayMax) until Run's context ends:
// Run never gives up and never crashes the process. Once connected, nats.go
// reconnects by itself with the same backoff; acks are never buffered while
// disconnected (they fail and the messages are redelivered). When the
// context ends Run stops pulling, waits for the handlers in flight to commit
// and ack, negatively acknowledges the messages it had fetched but not
// started (so another instance gets them at once), closes the connection
// and returns the context's error.
//
// The URL may embed credentials; they never appear in logs or errors.
package jetstreamconsumer
