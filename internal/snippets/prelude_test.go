package snippets

// prelude declares the names the documentation's snippets use without defining
// them: the reader's own client, store, types and business functions. Each entry
// is package-level Go; an entry may use other entries and the packages of
// imports. Only the entries a snippet needs (and theirs) go into its package.
var prelude = map[string]string{
	// clients and stores the reader already has
	"rdb":       `var rdb redis.UniversalClient`,
	"store":     `var store consumer.Store`,
	"pool":      `var pool *pgxpool.Pool`,
	"db":        `var db *sql.DB`,
	"awsCfg":    `var awsCfg aws.Config`,
	"brokers":   `var brokers []string`,
	"opts":      `var opts []kgo.Opt`,
	"addr1":     `var addr1 string`,
	"addr2":     `var addr2 string`,
	"addr3":     `var addr3 string`,
	"mux":       `var mux = http.NewServeMux()`,
	"sentinels": `var sentinels = []string{"127.0.0.1:26379"}`,
	"url":       `var url = "amqp://guest:guest@127.0.0.1:5672/"`,
	"topo":      `var topo = amqp.Topology{Queue: "orders"}`,

	// settings
	"lease":     `var lease = 30 * time.Second`,
	"retention": `var retention = 24 * time.Hour`,
	"chargesNS": `var chargesNS = uuid.MustParse("6ba7b811-9dad-11d1-80b4-00c04fd430c8")`,

	// the message at hand
	"order":   `var order Order`,
	"msg":     `var msg amqp091.Delivery`,
	"key":     `var key consumer.Key`,
	"payload": `var payload []byte`,
	"month":   `var month string`,

	// the reader's types
	"Order":    `type Order struct{ ID string }`,
	"Payment":  `type Payment struct{ ID string; Amount int64 }`,
	"Receipt":  `type Receipt struct{ ID string }`,
	"Charge":   `type Charge struct{ ID string }`,
	"Shipment": `type Shipment struct{ ID string }`,
	"Report":   "type Report struct{ data []byte }\n\nfunc (r Report) Bytes() []byte { return r.data }",

	// the reader's functions
	"charge":        `func charge(ctx context.Context, o Order, fence int64) (Receipt, error) { return Receipt{ID: o.ID}, nil }`,
	"handler":       `func handler(ctx context.Context) (Receipt, error) { return Receipt{}, nil }`,
	"build":         `func build(ctx context.Context, month string) Report { return Report{} }`,
	"userID":        `func userID(ctx context.Context) string { return "" }`,
	"currentUser":   `func currentUser(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }`,
	"fulfil":        "func fulfil(ctx context.Context, o Order, d amqp091.Delivery) (Shipment, error) {\n\treturn warehouse.Fulfil(ctx, o)\n}",
	"decodePayment": "func decodePayment(rec *kgo.Record) (Payment, error) {\n\tvar p Payment\n\treturn p, json.Unmarshal(rec.Value, &p)\n}",
	"decodeOrder":   "func decodeOrder(d amqp091.Delivery) (Order, error) {\n\tvar o Order\n\treturn o, json.Unmarshal(d.Body, &o)\n}",
	"gateway":       `var gateway interface{ Charge(ctx context.Context, p Payment) (Charge, error) }`,
	"warehouse":     `var warehouse interface{ Fulfil(ctx context.Context, o Order) (Shipment, error) }`,
	"charges":       `var charges http.Handler = http.NotFoundHandler()`,
	"reports":       `var reports = fence.Table{Name: "reports"}`,
}
