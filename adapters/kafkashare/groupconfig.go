package kafkashare

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SetGroupConfigs sets share-group configs of group on the cluster cl talks to
// (IncrementalAlterConfigs on the GROUP resource), for example
// share.auto.offset.reset=earliest (a new share group otherwise starts at the
// latest offset), share.record.lock.duration.ms or share.delivery.count.limit.
// The principal needs ALTER_CONFIGS on the group.
func SetGroupConfigs(ctx context.Context, cl *kgo.Client, group string, configs map[string]string) error {
	if cl == nil || group == "" || len(configs) == 0 {
		return fmt.Errorf("kafkashare: SetGroupConfigs needs a client, a group and at least one config")
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name = k
		v := configs[k]
		cfg.Value = &v
		res.Configs = append(res.Configs, cfg)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafkashare: set configs of share group %q: %w", group, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = ": " + *r.ErrorMessage
			}
			return fmt.Errorf("kafkashare: set configs of share group %q: %w%s", group, err, msg)
		}
	}
	return nil
}
