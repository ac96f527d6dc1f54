package providertest

import (
	"encoding/json"
	"strings"
	"testing"
)

// exerciseRedaction checks Redact, whose output is all an operator reading
// the audit trail sees of a payload: it must stay JSON, whatever it was
// given, and never show a sensitive value.
func exerciseRedaction(t *testing.T, s *suite) {
	t.Run("RedactHidesSensitiveValues", func(t *testing.T) {
		redacted := s.probe.Redact(s.h.Kind, s.h.ValidPayload)
		if !json.Valid(redacted) {
			t.Fatalf("Redact returned invalid JSON: %s", redacted)
		}
		for _, secret := range s.h.SensitiveValues {
			if strings.Contains(string(redacted), secret) {
				t.Errorf("Redact left %q in %s", secret, redacted)
			}
		}
		if garbage := s.probe.Redact(s.h.Kind, json.RawMessage("{not json")); !json.Valid(garbage) {
			t.Errorf("Redact(unparseable) returned invalid JSON: %s", garbage)
		}
	})
}
