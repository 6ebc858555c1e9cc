package dynamodb

import (
	"errors"

	"github.com/aws/smithy-go"
)

// capacityCodes are DynamoDB's error codes for a request refused for lack of
// capacity: the table's or index's provisioned throughput, the account's
// request rate, or throttling of an on-demand table.
var capacityCodes = map[string]bool{
	"ProvisionedThroughputExceededException": true,
	"RequestLimitExceeded":                   true,
	"ThrottlingException":                    true,
	"Throttling":                             true,
	"LimitExceededException":                 true,
}

// Throttled reports whether err (from any Store call, ExecuteIdempotently's
// Result.Err, or a client call) is DynamoDB refusing a request for lack of
// capacity, after the client's own retries with backoff gave up. Such an error
// is also a store outage (consumer.ErrStoreUnavailable): nothing ran, and the
// message is retried as for any outage. Raise the table's capacity, or the
// client's retry attempts (dynamodb.Options.RetryMaxAttempts), if it is frequent.
func Throttled(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && capacityCodes[api.ErrorCode()]
}
