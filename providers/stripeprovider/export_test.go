package stripeprovider

// SetListPageSize makes Reconcile list n PaymentIntents a page instead of
// 100, so that tests can reach the page bound with a few objects.
func SetListPageSize(p *Provider, n int64) { p.pageSize = n }
