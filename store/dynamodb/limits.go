package dynamodb

import (
	"github.com/idemkit/idemkit/consumer"
)

// The sizes DynamoDB allows.
const (
	// maxItem is the largest item DynamoDB stores: 400 KB, attribute names
	// and values together.
	maxItem = 400 << 10
	// maxPartitionKey is the longest partition key value, in bytes.
	maxPartitionKey = 2048
	// itemOverhead bounds a completed record's attributes other than its
	// partition key value and its result: their names, the state, five
	// numbers of at most 21 bytes, the 16-byte fingerprint (about 200 bytes),
	// with room to spare.
	itemOverhead = 1 << 10

	// MaxResult is the largest encoded result a record keeps: an item holds
	// 400 KB, less the longest partition key (2048 bytes) and the record's
	// other attributes (at most 1 KiB), 397 KiB in all. It is a store's result
	// limit (Settings().MaxResultSize) unless consumer.WithMaxResultSize gives
	// a lower one; New refuses a higher one. A result over the limit is
	// recorded as dropped: the key is done, SUCCESS says ResultDropped, and
	// duplicates get a consumer.ResultTooLargeError that names the limit.
	MaxResult = maxItem - maxPartitionKey - itemOverhead
)

// resultLimit resolves the store's result limit from opts, whose settings s
// are: MaxResult, or the lower limit WithMaxResultSize gave. A higher one given
// explicitly is refused, naming both. The default of consumer.WithMaxResultSize
// (consumer.DefaultMaxResultSize) is over MaxResult, so whether opts hold the
// option is told by resolving them again after a WithMaxResultSize(1) of the
// store's own: an option of the user's comes after it and wins.
func resultLimit(s consumer.Settings, opts []consumer.Option) (int, error) {
	if s.MaxResultSize <= MaxResult {
		return s.MaxResultSize, nil
	}
	probe, err := consumer.NewSettings(append([]consumer.Option{consumer.WithMaxResultSize(1)}, opts...)...)
	if err != nil {
		return 0, err
	}
	if probe.MaxResultSize == 1 { // the default, not the user's
		return MaxResult, nil
	}
	return 0, configError("WithMaxResultSize(%d) is over %d bytes, the largest result a DynamoDB item holds "+
		"(400 KB, less the record's key and other attributes): give at most %d, or omit it for that limit",
		s.MaxResultSize, MaxResult, MaxResult)
}

// checkKeyRoom refuses a prefix and scope that leave a key of
// consumer.MaxKeyLen bytes no room in a partition key.
func checkKeyRoom(s consumer.Settings) error {
	longest := len(s.Prefix) + len(s.Scope) + len(":{}") + consumer.MaxKeyLen
	if longest <= maxPartitionKey {
		return nil
	}
	return configError("WithPrefix of %d bytes and WithScope of %d bytes make record keys of up to %d bytes, over DynamoDB's "+
		"%d-byte partition key: shorten the prefix to at most %d bytes", len(s.Prefix), len(s.Scope), longest,
		maxPartitionKey, maxPartitionKey-len(s.Scope)-len(":{}")-consumer.MaxKeyLen)
}
