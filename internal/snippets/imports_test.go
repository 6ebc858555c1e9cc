package snippets

// imports maps the package names the snippets use to their import paths.
var imports = map[string]string{
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"json":        "encoding/json",
	"http":        "net/http",
	"sql":         "database/sql",
	"time":        "time",
	"os":          "os",
	"testing":     "testing",
	"uuid":        "github.com/google/uuid",
	"redis":       "github.com/redis/go-redis/v9",
	"goredis":     "github.com/redis/go-redis/v9",
	"kgo":         "github.com/twmb/franz-go/pkg/kgo",
	"amqp091":     "github.com/rabbitmq/amqp091-go",
	"pgx":         "github.com/jackc/pgx/v5",
	"pgxpool":     "github.com/jackc/pgx/v5/pgxpool",
	"consumer":    "github.com/idemkit/idemkit/consumer",
	"kafka":       "github.com/idemkit/idemkit/adapters/kafka",
	"kafkashare":  "github.com/idemkit/idemkit/adapters/kafkashare",
	"amqp":        "github.com/idemkit/idemkit/adapters/amqp",
	"nethttp":     "github.com/idemkit/idemkit/adapters/nethttp",
	"lock":        "github.com/idemkit/idemkit/lock",
	"fence":       "github.com/idemkit/idemkit/fence",
	"postgres":    "github.com/idemkit/idemkit/store/postgres",
	"redisstore":  "github.com/idemkit/idemkit/store/redis",
	"memory":      "github.com/idemkit/idemkit/store/memory",
	"idemkittest": "github.com/idemkit/idemkit/idemkittest",
	"admin":       "github.com/idemkit/idemkit/admin",
	"ui":          "github.com/idemkit/idemkit/admin/ui",
	"replay":      "github.com/idemkit/idemkit/replay",
	"dynamodb":    "github.com/idemkit/idemkit/store/dynamodb",
	"aws":         "github.com/aws/aws-sdk-go-v2/aws",
	"awsdynamodb": "github.com/aws/aws-sdk-go-v2/service/dynamodb",
	"idemprom":    "github.com/idemkit/idemkit/contrib/idemprom",
	"prometheus":  "github.com/prometheus/client_golang/prometheus",
	"idemotel":    "github.com/idemkit/idemkit/contrib/idemotel",
}

// modules names, for import paths outside the root module's requirements, the
// module (a directory of the repository) whose go.mod has them; the longest
// matching prefix wins. A snippet is built in the module its imports need.
var modules = map[string]string{
	"github.com/idemkit/idemkit/store/dynamodb": "store/dynamodb",
	"github.com/aws/aws-sdk-go-v2":              "store/dynamodb",
	// the one module that requires both observability plugins
	"github.com/idemkit/idemkit/contrib/idemprom":    "internal/bench/plugins",
	"github.com/idemkit/idemkit/contrib/idemotel":    "internal/bench/plugins",
	"github.com/prometheus/client_golang/prometheus": "internal/bench/plugins",
}
