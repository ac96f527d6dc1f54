// Package brokerloop is what the broker consumers (intents/amqpconsumer and
// intents/jetstreamconsumer) share: the run loop that runs a consumer's
// sessions one after another, with a capped backoff between them, and
// refuses a second Run (Loop); the workers that drain one session (Work);
// and the verdict on one delivery once Consume has returned (Decide).
//
// A consumer plugs in what only its broker knows: dialling and
// subscribing, acknowledging, redelivering, terminating or dead-lettering,
// reading the message id and the delivery count from its headers, and the
// words it logs. The package knows nothing of any broker's client.
package brokerloop
