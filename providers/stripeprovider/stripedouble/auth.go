package stripedouble

import (
	"net/http"
	"strings"
)

// authorize checks the bearer key and answers 401 when it is wrong.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, reqID string) bool {
	auth := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	key = strings.TrimSpace(key)
	s.mu.Lock()
	failure := s.authFailure
	s.mu.Unlock()
	if ok && key == s.apiKey {
		switch failure {
		case AuthKeyExpired:
			s.writeError(w, r, reqID, http.StatusUnauthorized, apiError{
				Type:    "invalid_request_error",
				Code:    "api_key_expired",
				Message: "Expired API Key provided: " + maskKey(key),
				DocURL:  "https://stripe.com/docs/error-codes/api-key-expired",
			})
			return false
		case AuthKeyRestricted:
			s.writeError(w, r, reqID, http.StatusForbidden, apiError{
				Type:    "invalid_request_error",
				Message: "The provided key '" + maskKey(key) + "' does not have the required permissions for this endpoint on account 'acct_double'. Having the 'rak_payment_intent_write' permission would allow this request to continue.",
			})
			return false
		}
		return true
	}
	w.Header().Set("Www-Authenticate", `Bearer realm="Stripe"`)
	if !ok || key == "" {
		s.writeError(w, r, reqID, http.StatusUnauthorized, apiError{
			Type:    "invalid_request_error",
			Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/.",
		})
		return false
	}
	s.writeError(w, r, reqID, http.StatusUnauthorized, apiError{
		Type:    "invalid_request_error",
		Message: "Invalid API Key provided: " + maskKey(key),
	})
	return false
}

// maskKey masks an API key the way Stripe's error messages do: the prefix
// ("sk_test_") and, for keys long enough, the last four characters stay
// visible; everything else becomes '*'. The result never equals the key.
func maskKey(key string) string {
	prefix := ""
	for _, p := range []string{"sk_test_", "sk_live_", "rk_test_", "rk_live_", "pk_test_", "pk_live_"} {
		if strings.HasPrefix(key, p) {
			prefix = p
			break
		}
	}
	rest := key[len(prefix):]
	if len(rest) >= 12 {
		return prefix + strings.Repeat("*", len(rest)-4) + rest[len(rest)-4:]
	}
	return prefix + strings.Repeat("*", max(len(rest), 4))
}
