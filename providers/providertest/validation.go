package providertest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/outboxkit/outbox/providers"
)

// exerciseValidation checks Validate, which runs when a consumer records an
// intent: whatever it accepts is stored and later performed, so it must
// accept the valid payload and refuse the rest naming the field.
func exerciseValidation(t *testing.T, s *suite) {
	t.Run("ValidateAcceptsValidPayload", func(t *testing.T) {
		if err := s.probe.Validate(s.h.Kind, s.h.ValidPayload); err != nil {
			t.Fatalf("Validate(valid payload) = %v", err)
		}
	})

	t.Run("ValidateNamesTheField", func(t *testing.T) {
		cases := map[string]string{"[]": "", `{"not_a_field": 1}`: "not_a_field"}
		for payload, field := range s.h.InvalidPayloads {
			cases[payload] = field
		}
		for payload, field := range cases {
			err := s.probe.Validate(s.h.Kind, json.RawMessage(payload))
			var payloadErr *providers.PayloadError
			if !errors.As(err, &payloadErr) {
				t.Errorf("Validate(%s) = %v, want a *PayloadError", payload, err)
				continue
			}
			if payloadErr.Field != field {
				t.Errorf("Validate(%s) names field %q, want %q (error: %v)", payload, payloadErr.Field, field, err)
			}
		}
	})

	t.Run("ValidateRejectsUnknownKind", func(t *testing.T) {
		if err := s.probe.Validate("no.such_kind", s.h.ValidPayload); !errors.Is(err, providers.ErrUnknownKind) {
			t.Fatalf("Validate(unknown kind) = %v, want ErrUnknownKind", err)
		}
	})
}
