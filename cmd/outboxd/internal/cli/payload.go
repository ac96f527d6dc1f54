package cli

import (
	"flag"
	"fmt"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/ingest"
)

// maxPayloadLimit is the most --max-payload-bytes may be: room for the
// largest request a provider takes (SendGrid's 30 MB), and a bound on what
// one message makes a process hold (ingest.MessageBytesPerPayload times
// it, 512 MiB).
const maxPayloadLimit = 32 << 20

// registerPayloadFlag registers --max-payload-bytes: the one payload limit
// (intents.Config.MaxPayloadBytes), from which the doors' message limits
// are derived.
func registerPayloadFlag(fs *flag.FlagSet, target *int) {
	fs.IntVar(target, "max-payload-bytes", intents.DefaultMaxPayloadBytes, fmt.Sprintf(
		"largest intent payload accepted, in bytes of JSON (at most %d); a whole message may take %d times it", maxPayloadLimit, ingest.MessageBytesPerPayload))
}

func checkPayloadFlag(n int) error {
	if n < 1 || n > maxPayloadLimit {
		return usageErrorf("--max-payload-bytes must be between 1 and %d, got %d", maxPayloadLimit, n)
	}
	return nil
}
