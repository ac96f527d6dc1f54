package sendgriddouble_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

// body is a valid mail send body with personalizations p and extra
// top-level fields.
func body(p, extra string) []byte {
	return []byte(`{"personalizations":` + p + `,"from":{"email":"shop@example.com"},"subject":"s","content":[{"type":"text/plain","value":"t"}]` + extra + `}`)
}

const onePersonalization = `[{"to":[{"email":"a@example.com"}]}]`

func TestRefusesWhatSendGridRefuses(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{Now: func() time.Time { return fixedNow }})
	bigArgs, _ := json.Marshal(map[string]string{"big": strings.Repeat("x", 10000)})
	for _, tc := range []struct {
		name  string
		body  []byte
		field string
		says  string
	}{
		{"DuplicateCategory", body(onePersonalization, `,"categories":["receipts","receipts"]`), "categories.1", "unique"},
		{"NonASCIICategory", body(onePersonalization, `,"categories":["café"]`), "categories.0", "ASCII"},
		{"ElevenCategories", body(onePersonalization, `,"categories":["0","1","2","3","4","5","6","7","8","9","10"]`), "categories", "maximum number of categories is 10"},
		{"AddressInTwoPersonalizations", body(`[{"to":[{"email":"a@example.com"}]},{"to":[{"email":"A@example.com"}]}]`, ""), "personalizations.1.to.0.email", "only be included once"},
		{"NameWithComma", body(`[{"to":[{"email":"a@example.com","name":"Doe, Jane"}]}]`, ""), "personalizations.0.to.0.name", "cannot contain"},
		{"NameWithSemicolon", body(`[{"to":[{"email":"a@example.com"}],"cc":[{"email":"c@example.com","name":"a;b"}]}]`, ""), "personalizations.0.cc.0.name", "cannot contain"},
		{"CustomArgsTooLarge", body(onePersonalization, `,"custom_args":`+string(bigArgs)), "custom_args", "less than 10000 bytes"},
		{"SendAtTooFar", body(onePersonalization, fmt.Sprintf(`,"send_at":%d`, fixedNow.Add(72*time.Hour+time.Second).Unix())), "send_at", "72 hours"},
	} {
		resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		var eb errorBody
		_ = json.Unmarshal([]byte(resp.Body), &eb)
		found := false
		for _, e := range eb.Errors {
			if e.Field != nil && *e.Field == tc.field && strings.Contains(e.Message, tc.says) {
				found = true
			}
		}
		if resp.StatusCode != http.StatusBadRequest || !found {
			t.Errorf("%s: %d %s", tc.name, resp.StatusCode, resp.Body)
		}
	}
	if n := len(s.Emails()); n != 0 {
		t.Fatalf("%d emails accepted from refused requests", n)
	}
	// The limits themselves are accepted.
	for _, b := range [][]byte{
		body(`[{"to":[{"email":"a@example.com","name":"Ann O'Neil"}]},{"to":[{"email":"b@example.com"}]}]`, `,"categories":["0","1","2","3","4","5","6","7","8","9"]`),
		body(onePersonalization, fmt.Sprintf(`,"send_at":%d,"categories":["Receipts","receipts"]`, fixedNow.Add(72*time.Hour).Unix())),
	} {
		if resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, b); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Errorf("%s: %v %v", b, resp, err)
		}
	}
}

func TestAuthFailureModes(t *testing.T) {
	t.Parallel()
	s := start(t, sendgriddouble.Config{})
	for mode, want := range map[sendgriddouble.AuthFailure]int{
		sendgriddouble.AuthKeyRevoked:         http.StatusUnauthorized,
		sendgriddouble.AuthCreditsExceeded:    http.StatusUnauthorized,
		sendgriddouble.AuthMissingScope:       http.StatusForbidden,
		sendgriddouble.AuthTemporarilyBlocked: http.StatusForbidden,
	} {
		s.SetAuthFailure(mode)
		resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, body(onePersonalization, ""))
		if err != nil || resp.StatusCode != want || !strings.Contains(resp.Body, `"errors"`) {
			t.Fatalf("mode %d: %v %v", mode, resp, err)
		}
	}
	s.SetAuthFailure(sendgriddouble.AuthOK)
	if n := len(s.Emails()); n != 0 {
		t.Fatalf("%d emails accepted", n)
	}
	if resp, err := sendBody(t, s, sendgriddouble.DefaultAPIKey, body(onePersonalization, "")); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("after AuthOK: %v %v", resp, err)
	}
}
