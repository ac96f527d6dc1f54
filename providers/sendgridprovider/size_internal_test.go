package sendgridprovider

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/providers"
)

// TestCheckSizeKeepsRoomForTheIdentity: the limit is on the request Perform
// sends, the intent's identity included, whatever its escaping. Checked
// with a small limit: the arithmetic is the same at 30MB.
func TestCheckSizeKeepsRoomForTheIdentity(t *testing.T) {
	t.Parallel()
	e := &Email{
		From: &Address{Email: "shop@example.com"}, To: []Address{{Email: "a@example.com"}}, Subject: "s", Text: "t",
		Attachments: []Attachment{{Content: strings.Repeat("QUFB", 100), Filename: "a.txt"}},
	}
	size := requestSize(e)
	var pe *providers.PayloadError
	if err := e.checkSize(size + identityReserve); !errors.As(err, &pe) || pe.Field != "attachments" {
		t.Fatalf("checkSize(limit at the request plus reserve) = %v, want refused", err)
	}
	if err := e.checkSize(size + identityReserve + 1); err != nil {
		t.Fatalf("checkSize(one byte more) = %v", err)
	}
	// The reserve holds the longest identity Perform sends, escaped at
	// worst: namespace and key of MaxIdentityBytes characters that JSON
	// escapes to 6 bytes each, and the largest intent id.
	worst := providers.Request{Namespace: strings.Repeat("<", MaxIdentityBytes/2), IdempotencyKey: strings.Repeat("\x01", MaxIdentityBytes-MaxIdentityBytes/2), IntentID: 1<<63 - 1}
	full, err := json.Marshal(mailBody(e, worst))
	if err != nil {
		t.Fatal(err)
	}
	if len(full) >= size+identityReserve {
		t.Fatalf("the request with the worst identity is %d bytes, beyond the %d reserved", len(full), size+identityReserve)
	}
}
