// Command idemkit operates the idempotency records of services built on idemkit:
// it inspects, lists and counts records, unsticks, forgets and reruns keys, derives
// keys from business ids, measures the deployment's Redis, and plans and runs
// replays of old messages. Records may be in Redis (the default), PostgreSQL or
// DynamoDB.
//
// Install it with
//
//	go install github.com/idemkit/idemkit/cmd/idemkit@latest
//
// # Commands
//
//	inspect KEY                      one record: state, owner, fence, attempts, lease left,
//	                                 fingerprint, times, result size, error history
//	list [--state S] [--older-than D] [--limit N] [--cursor C]
//	                                 records by state and age (bounded scans; on Redis,
//	                                 SCANs on every primary)
//	stats [--max-records N]          counts by state, the oldest started record (sampled past N)
//	unstick KEY --reason TEXT        end a started claim whose owner is gone
//	forget KEY --reason TEXT         remove a record, keeping its fence
//	rerun KEY --reason TEXT          let a completed or failed key run once more
//	unstick|forget|rerun --all [filters] --reason TEXT [--execute N]
//	                                 the same on every record the filters select:
//	                                 a preview, or with --execute N the change
//	keygen NS PARTS...               the key consumer.NewKey(NS, PARTS...) derives
//	bench                            floor / ExecuteIdempotently / ExecuteBatch on this Redis
//	                                 (Redis only)
//	plan (--jsonl F | --topic T | --queue Q)
//	                                 what a replay would do, read-only
//	replay ... --exec CMD [--execute]
//	                                 run CMD once per message whose key is not done
//	redrive (--topic DLQ | --queue DLQ) [--rerun --reason TEXT] [--execute]
//	                                 move Kafka or RabbitMQ dead letters back to their source
//	ui [--listen ADDR] [--allow-changes] [--plans DIR]
//	                                 serve the operator web UI (package admin/ui), read-only
//	                                 unless --allow-changes (loopback only, needs --scope)
//
// unstick, forget and rerun record "<op> by <actor>: <reason>" in the record's
// history; the actor is --actor, else $USER. --fence makes a change conditional on
// the fence inspect showed. With --all instead of a KEY they act on every record of
// --scope that the filters select: --state, --older-than, --owner-prefix (one
// process's claims share their owner token's prefix), --key-prefix,
// --lease-ran-out (started records nobody renews), --error-kind permanent|exhausted
// and --error-contains TEXT (a failed or retry record's last error). Without
// --execute that is a preview: the count and a few of the records (--sample),
// nothing changed. --execute N, N being the count the preview printed, changes
// them, and refuses (exit 4) when the count differs by then or exceeds --max
// (default 1000). Each record is changed only if it still holds the fence and
// state the preview saw, and still matches the filters; one that moved on is
// left alone and reported as moved (exit 4 once the others are done). The
// dead replica's stuck keys, say:
//
//	idemkit --scope payments unstick --all --owner-prefix 3fa8c1d2e4b5a6f7- --lease-ran-out --reason "replica 7 died"
//	idemkit --scope payments unstick --all --owner-prefix 3fa8c1d2e4b5a6f7- --lease-ran-out --reason "replica 7 died" --execute 36
//
// replay and redrive are dry runs that print what they would do unless
// --execute is given; replay resumes from --checkpoint, which it writes only after the effects of the messages before it are recorded. SIGINT or
// SIGTERM stops a replay after its running commands: each one's process group gets
// SIGTERM, and SIGKILL for whatever is left once the command has exited or 5 s
// have passed; its message is given back without counting an attempt, and the
// checkpoint is saved. A RabbitMQ queue (--queue) has no offsets:
// plan returns every message to it, replay acks off it what ran or was a duplicate
// and leaves the rest, and redrive acks a dead letter only once the broker
// confirmed its copy on the work queue.
//
// Every command prints a table or, with --json, JSON on standard output; list
// prints its count, and replay its progress, to standard error.
//
// # Stores
//
// Records live in Redis unless a flag or its environment variable names another
// store:
//
//	--postgres DSN [IDEMKIT_POSTGRES_DSN]   PostgreSQL (postgres.NewStore), a pgx
//	                                        connection string; the service migrates
//	                                        the tables (postgres.Migrate), the command
//	                                        never does. Its schema, if not public,
//	                                        goes in the DSN: ...&search_path=idemkit
//	--postgres-partitioned [IDEMKIT_POSTGRES_PARTITIONED]
//	                                        the time-partitioned table
//	                                        (postgres.NewPartitionedStore)
//	--dynamodb TABLE [IDEMKIT_DYNAMODB_TABLE]
//	                                        DynamoDB (the store/dynamodb module); the
//	                                        region and credentials are the AWS SDK's
//	                                        (config.LoadDefaultConfig: AWS_REGION,
//	                                        AWS_PROFILE, the instance's role, ...)
//	--dynamodb-endpoint URL [IDEMKIT_DYNAMODB_ENDPOINT]
//	                                        DynamoDB Local or dynalite (region
//	                                        us-east-1 unless the SDK finds one; such a
//	                                        server still wants some credentials, any)
//
// One store per command: two of --redis, --postgres and --dynamodb is a usage
// error (exit 2) that names them; so are two stores named only by the
// environment (IDEMKIT_REDIS_ADDR, IDEMKIT_POSTGRES_DSN, IDEMKIT_DYNAMODB_TABLE),
// and a flag of one kind of store (--cluster, --postgres-partitioned,
// --dynamodb-endpoint, ...) given with another. A store flag wins over the
// environment's other stores. --prefix is the service's WithPrefix on Redis and
// DynamoDB; PostgreSQL keys records by scope and key alone.
//
// Every record command works on every store, through the operator interface
// (admin.Store) and the store interface (consumer.Store) that each store
// implements: inspect, list, stats, unstick, forget and rerun, one KEY or
// --all, and plan, replay and redrive. stats counts every key on the server
// only on Redis. bench measures Redis itself and refuses the other stores
// (exit 2).
//
// # Connections
//
// Redis: --redis host:port [IDEMKIT_REDIS_ADDR], --cluster with seed nodes
// [IDEMKIT_REDIS_CLUSTER], --sentinel-master NAME with sentinel addresses
// [IDEMKIT_REDIS_SENTINEL_MASTER], --redis-username [IDEMKIT_REDIS_USERNAME],
// --redis-password [IDEMKIT_REDIS_PASSWORD], --redis-db, --redis-tls
// [IDEMKIT_REDIS_TLS], --redis-tls-ca FILE [IDEMKIT_REDIS_TLS_CA]. Records:
// --prefix [IDEMKIT_PREFIX], --scope [IDEMKIT_SCOPE], --retention
// [IDEMKIT_RETENTION]: the service's WithPrefix, WithScope and WithRetention.
// Kafka: --kafka-brokers [IDEMKIT_KAFKA_BROKERS], --kafka-tls [IDEMKIT_KAFKA_TLS],
// --kafka-tls-ca [IDEMKIT_KAFKA_TLS_CA], --kafka-sasl PLAIN|SCRAM-SHA-256|SCRAM-SHA-512
// [IDEMKIT_KAFKA_SASL], --kafka-username, --kafka-password [IDEMKIT_KAFKA_USERNAME,
// IDEMKIT_KAFKA_PASSWORD]. RabbitMQ: --amqp-url [IDEMKIT_AMQP_URL], amqps:// for
// TLS, credentials and vhost in the URL. Every store call, and each connection
// attempt, is bounded by --timeout [IDEMKIT_TIMEOUT].
//
// # Scopes
//
// The commands that change records or run commands for messages (unstick,
// forget, rerun, replay, redrive) need the service's --scope [IDEMKIT_SCOPE] and
// refuse the default scope "default", dry runs included, with exit 2 and the
// error of consumer.Settings.CheckScope, the rule the broker adapters follow:
// services that handle the same messages each keep records of their own, and a
// command given no scope would act on none of them (a replay would run every
// message again). The commands that only read work on any scope and say which one
// they read: with no --scope, inspect and plan read "default", list and stats
// read every scope.
//
// # Exit codes
//
// They are stable; scripts and cron jobs may rely on them.
//
//	0  done; for replay --execute: every message ended RAN or DUPLICATE
//	1  failed for another reason (the message says why)
//	2  bad usage or configuration: an unknown flag, a missing argument, a value
//	   out of range, or a command that changes records given no --scope or the
//	   default one
//	3  no record at the key
//	4  refused: the record's state or fence does not allow the change; a bulk
//	   --execute N whose count differs from the preview's or exceeds --max, or
//	   that left records alone because they moved on; or the replay's retention
//	   guard stopped it (--accept-beyond-retention)
//	5  the store (Redis, PostgreSQL, DynamoDB), Kafka or RabbitMQ did not answer
//	   (a replay stops after the first batch the store did not answer)
//	6  a replay finished with messages that did not settle (ERROR: retryable
//	   errors; IN_PROGRESS: held elsewhere) and none of code 7's: run it again to
//	   retry them
//	7  a replay finished with messages that running it again will not settle:
//	   FAILED (failed for good, their dead letters stand), CONFLICT, CORRUPT,
//	   INVALID or QUARANTINE; the output names them
//	8  interrupted by SIGINT or SIGTERM before it finished (a replay stops after
//	   its running commands and saves its checkpoint: run it again to resume)
//
// A replay that stops before the end of its source exits with why it stopped (2,
// 4, 5 or 8), whatever it counted; one that reached the end exits 7 if any
// message ended as code 7 says, else 6 if any ended as code 6 says, else 0. plan,
// and replay without --execute, exit 0 once the plan is made, whatever it finds;
// both name the INVALID messages (a file's line number, or a partition and
// offset) and why.
//
// # Dependencies
//
// Flags and subcommands are github.com/spf13/cobra (with spf13/pflag): the most
// used Go command framework, with POSIX flags, generated help and typed flag
// errors, kept up by a large community. The replay's progress bar is
// github.com/schollz/progressbar/v3, small and maintained, with throttled
// redraws; golang.org/x/term tells whether standard error is a terminal. The
// DynamoDB client is configured by github.com/aws/aws-sdk-go-v2/config, the SDK's
// own loader of regions and credentials. They live in this module of their own,
// so services that import idemkit never download them.
package main
