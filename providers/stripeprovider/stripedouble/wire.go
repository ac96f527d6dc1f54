package stripedouble

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// ---- HTTP plumbing ----

// apiError is Stripe's error object, as stripe-go decodes it.
type apiError struct {
	Type          string         `json:"type"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	Message       string         `json:"message"`
	Param         string         `json:"param,omitempty"`
	DocURL        string         `json:"doc_url,omitempty"`
	Charge        string         `json:"charge,omitempty"`
	PaymentIntent map[string]any `json:"payment_intent,omitempty"`
	RequestLogURL string         `json:"request_log_url,omitempty"`
}

func errorBody(e apiError) []byte {
	b, _ := json.Marshal(map[string]apiError{"error": e})
	return b
}

const msgServerError = "Sorry, something went wrong. We've already been notified of the problem, but if you need any help, you can reach out to support: https://support.stripe.com/contact"

func serverErrorBody(status int) []byte {
	msg := msgServerError
	if status != http.StatusInternalServerError {
		msg = fmt.Sprintf("The Stripe API is temporarily unavailable (HTTP %d). Please retry the request with the same idempotency key.", status)
	}
	return errorBody(apiError{Type: "api_error", Message: msg})
}

func (s *Server) write(w http.ResponseWriter, r *http.Request, reqID string, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Request-Id", reqID)
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		h.Set("Idempotency-Key", k)
	}
	if v := r.Header.Get("Stripe-Version"); v != "" {
		h.Set("Stripe-Version", v)
	} else {
		h.Set("Stripe-Version", APIVersion)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, reqID string, status int, e apiError) {
	if e.RequestLogURL == "" && e.Type != "" {
		e.RequestLogURL = "https://dashboard.stripe.com/test/logs/" + reqID
	}
	s.write(w, r, reqID, status, errorBody(e))
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// wire renders the PaymentIntent as Stripe's JSON object.
func (pi *PaymentIntent) wire() map[string]any {
	md := make(map[string]string, len(pi.Metadata))
	for k, v := range pi.Metadata {
		md[k] = v
	}
	m := map[string]any{
		"id":                          pi.ID,
		"object":                      "payment_intent",
		"amount":                      pi.Amount,
		"amount_capturable":           pi.AmountCapturable,
		"amount_received":             0,
		"capture_method":              pi.CaptureMethod,
		"client_secret":               pi.ID + "_secret_" + strings.Repeat("x", 25),
		"confirmation_method":         "automatic",
		"created":                     pi.Created.Unix(),
		"currency":                    pi.Currency,
		"customer":                    nullable(pi.Customer),
		"description":                 nullable(pi.Description),
		"last_payment_error":          nil,
		"latest_charge":               nil,
		"livemode":                    false,
		"metadata":                    md,
		"payment_method":              nullable(pi.PaymentMethod),
		"payment_method_types":        []string{"card"},
		"receipt_email":               nullable(pi.ReceiptEmail),
		"statement_descriptor_suffix": nullable(pi.StatementDescriptorSuffix),
		"status":                      pi.Status,
	}
	if pi.CaptureMethod == "" {
		m["capture_method"] = "automatic"
	}
	if pi.PaymentMethodTypes != nil {
		m["payment_method_types"] = pi.PaymentMethodTypes
	}
	if pi.AutomaticPaymentMethods {
		apm := map[string]any{"enabled": true}
		if pi.AllowRedirects != "" {
			apm["allow_redirects"] = pi.AllowRedirects
		}
		m["automatic_payment_methods"] = apm
	}
	m["setup_future_usage"] = nullable(pi.SetupFutureUsage)
	m["cancellation_reason"] = nullable(pi.CancellationReason)
	m["canceled_at"] = nil
	if !pi.CanceledAt.IsZero() {
		m["canceled_at"] = pi.CanceledAt.Unix()
	}
	switch pi.Status {
	case "succeeded":
		m["amount_received"] = pi.Amount
		if pi.AmountReceived != 0 {
			m["amount_received"] = pi.AmountReceived
		}
		m["latest_charge"] = chargeID(pi.ID)
	case "requires_capture", "processing":
		m["latest_charge"] = chargeID(pi.ID)
	case "requires_action":
		m["next_action"] = map[string]any{"type": "use_stripe_sdk", "use_stripe_sdk": map[string]any{"type": "three_d_secure_redirect"}}
	}
	if pi.DeclineCode != "" {
		m["latest_charge"] = chargeID(pi.ID)
		m["payment_method"] = nil
		code := "card_declined"
		if pi.DeclineCode == "authentication_required" {
			code = "authentication_required"
		}
		m["last_payment_error"] = map[string]any{
			"type":         "card_error",
			"code":         code,
			"decline_code": pi.DeclineCode,
			"message":      declineMessage(pi.DeclineCode),
			"charge":       chargeID(pi.ID),
		}
	}
	return m
}
