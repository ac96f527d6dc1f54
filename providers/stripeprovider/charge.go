package stripeprovider

import (
	"fmt"
	"net/url"
	"strings"
	"unicode"

	"github.com/outboxkit/outbox/providers"
)

// MinimumAmounts is Stripe's minimum charge per currency, in the currency's
// smallest unit, from Stripe's table of minimum and maximum charge amounts
// (https://docs.stripe.com/currencies#minimum-and-maximum-charge-amounts).
// Validate refuses a smaller amount in these currencies. (Stripe's real
// minimum is the equivalent of the settlement currency's, so a charge in
// another currency can still be refused at dispatch.)
var MinimumAmounts = map[string]int64{
	"usd": 50, "aed": 200, "aud": 50, "bgn": 100, "brl": 50, "cad": 50,
	"chf": 50, "czk": 1500, "dkk": 250, "eur": 50, "gbp": 30, "hkd": 400,
	"huf": 17500, "inr": 50, "jpy": 50, "mxn": 1000, "myr": 200, "nok": 300,
	"nzd": 50, "pln": 200, "ron": 200, "sek": 300, "sgd": 50, "thb": 1000,
}

// ZeroDecimalCurrencies have no minor unit: their amounts are whole units
// (an amount of 500 in jpy is ¥500, not ¥5).
var ZeroDecimalCurrencies = map[string]bool{
	"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true,
	"krw": true, "mga": true, "pyg": true, "rwf": true, "ugx": true, "vnd": true,
	"vuv": true, "xaf": true, "xof": true, "xpf": true,
}

// ThreeDecimalCurrencies have three decimals; Stripe only charges whole
// hundredths of them, so their amounts must end in 0.
var ThreeDecimalCurrencies = map[string]bool{
	"bhd": true, "jod": true, "kwd": true, "omr": true, "tnd": true,
}

// checkAmount applies Stripe's per-currency rules to a positive amount.
func checkAmount(kind string, amount int64, currency string) error {
	bad := func(reason string) error {
		return &providers.PayloadError{Kind: kind, Field: "amount", Reason: reason}
	}
	if ThreeDecimalCurrencies[currency] && amount%10 != 0 {
		return bad(fmt.Sprintf("must end in 0: %s has three decimals and Stripe charges it in multiples of 10 of its smallest unit", currency))
	}
	if min, ok := MinimumAmounts[currency]; ok && amount < min {
		unit := "its smallest unit"
		if ZeroDecimalCurrencies[currency] {
			unit = "whole units: it has no decimals"
		}
		return bad(fmt.Sprintf("must be at least %d for %s (Stripe's minimum charge, in %s)", min, currency, unit))
	}
	return nil
}

func hasLetter(s string) bool {
	return strings.IndexFunc(s, unicode.IsLetter) >= 0
}

func isTrue(b *bool) bool { return b != nil && *b }

// checkCharge refuses the combinations of the charge parameters that Stripe
// refuses, and a confirmation that would need a return_url it lacks.
func checkCharge(kind string, pl *PaymentIntentPayload) error {
	bad := func(field, reason string) error {
		return &providers.PayloadError{Kind: kind, Field: field, Reason: reason}
	}
	confirm := isTrue(pl.Confirm)
	offSession := isTrue(pl.OffSession)
	switch pl.CaptureMethod {
	case "", CaptureAutomatic, CaptureAutomaticAsync, CaptureManual:
	default:
		return bad("capture_method", `must be "automatic", "automatic_async" or "manual"`)
	}
	switch pl.SetupFutureUsage {
	case "", SetupOnSession, SetupOffSession:
	default:
		return bad("setup_future_usage", `must be "on_session" or "off_session"`)
	}
	if pl.PaymentMethodTypes != nil {
		if len(pl.PaymentMethodTypes) == 0 {
			return bad("payment_method_types", "must list at least one payment method type, or be left out")
		}
		seen := map[string]bool{}
		for i, t := range pl.PaymentMethodTypes {
			field := fmt.Sprintf("payment_method_types[%d]", i)
			if !pmTypeRE.MatchString(t) {
				return bad(field, `must be a payment method type such as "card"`)
			}
			if seen[t] {
				return bad(field, "is listed twice")
			}
			seen[t] = true
		}
	}
	if apm := pl.AutomaticPaymentMethods; apm != nil {
		switch {
		case pl.PaymentMethodTypes != nil:
			return bad("automatic_payment_methods", "cannot be given with payment_method_types: Stripe takes only one of them")
		case apm.Enabled == nil:
			return bad("automatic_payment_methods.enabled", "is required")
		}
		switch apm.AllowRedirects {
		case "", RedirectsAlways, RedirectsNever:
		default:
			return bad("automatic_payment_methods.allow_redirects", `must be "always" or "never"`)
		}
		if apm.AllowRedirects != "" && !*apm.Enabled {
			return bad("automatic_payment_methods.allow_redirects", "applies only when automatic_payment_methods.enabled is true")
		}
	}
	if pl.OffSession != nil && !confirm {
		return bad("off_session", "requires confirm: true (Stripe takes off_session only when confirming)")
	}
	if confirm && pl.PaymentMethod == "" {
		return bad("payment_method", "is required with confirm: true: a background charge has no customer to choose one")
	}
	if pl.ReturnURL != "" {
		if !confirm {
			return bad("return_url", "is taken only with confirm: true")
		}
		if u, err := url.Parse(pl.ReturnURL); err != nil || u.Scheme == "" || strings.ContainsAny(pl.ReturnURL, " \t\r\n") || len(pl.ReturnURL) > 2048 {
			return bad("return_url", "must be an absolute URL (https://...) of at most 2048 characters")
		}
	}
	if confirm && pl.ReturnURL == "" {
		if apm := pl.AutomaticPaymentMethods; apm != nil && *apm.Enabled && apm.AllowRedirects != RedirectsNever {
			return bad("return_url", `is required to confirm with automatic_payment_methods that allow redirects: give one, set automatic_payment_methods.allow_redirects to "never", or list payment_method_types`)
		}
	}
	if offSession && pl.SetupFutureUsage == SetupOnSession {
		return bad("setup_future_usage", `cannot be "on_session" on an off-session charge (Stripe refuses it); use "off_session"`)
	}
	return nil
}

// redirectFreeDefault reports whether Perform adds
// automatic_payment_methods[enabled]=true and [allow_redirects]=never: a
// confirmation that names neither automatic_payment_methods nor
// payment_method_types.
func redirectFreeDefault(pl *PaymentIntentPayload) bool {
	return isTrue(pl.Confirm) && pl.AutomaticPaymentMethods == nil && pl.PaymentMethodTypes == nil
}
