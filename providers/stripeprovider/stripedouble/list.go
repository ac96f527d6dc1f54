package stripedouble

import (
	"net/http"
	"net/url"
)

// ---- GET /v1/payment_intents ----

// handleList serves GET /v1/payment_intents as Stripe does: filtered by
// customer and created ([gt], [gte], [lt], [lte] or an exact time), limit
// 1 to 100 (10 by default), paginated by starting_after or ending_before,
// newest first, in a list object with has_more. Unlike search it sees every
// PaymentIntent at once (Stripe's list endpoints are strongly consistent).
// Unknown parameters are a 400, as Stripe answers them.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	s.serveList(w, r, "/v1/payment_intents", []string{"customer"}, func(q url.Values, lp listParams) ([]map[string]any, bool, *apiError) {
		customer, byCustomer := q.Get("customer"), q.Has("customer")
		return listPage(s.pis, lp, "payment_intent", func(pi *PaymentIntent) bool {
			return !byCustomer || pi.Customer == customer
		})
	})
}
