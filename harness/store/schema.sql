-- Results store schema (DESIGN section 5). Contract: add columns freely, never rename or drop.
--
-- harness/store/store.py applies this file to harness.duckdb whenever its sha256 changes, after adding any
-- column listed here that an older database lacks (ALTER TABLE ... ADD COLUMN), so a new column
-- must be nullable (no NOT NULL). The same file, run on an in-memory database, is where the
-- result-file validator learns each column's type: this file is the single source of truth.
-- Allowed values of role/status/split/site are checked in Python (harness/store/validate.py), not by CHECK
-- constraints, because DuckDB cannot alter a CHECK constraint when a set grows.

-- One row per run; written from the run's result file (RESULTS/runs/<run_id>.json).
CREATE TABLE IF NOT EXISTS runs (
    run_id        VARCHAR PRIMARY KEY,
    grid          VARCHAR NOT NULL,      -- grid name ('' or 'adhoc' for `harness run`; 'tune:NAME': tuning trials)
    variant       VARCHAR NOT NULL,      -- e.g. block_attnres, rd_attnres, param_matched
    role          VARCHAR NOT NULL,      -- parent | treatment | control | reference | tune
    seed          INTEGER NOT NULL,
    size          VARCHAR NOT NULL,      -- size preset: tiny | mini | small | 120m | 343m
    budget_tokens BIGINT  NOT NULL,      -- training budget in tokens
    protocol_hash VARCHAR,               -- sha256 of the frozen protocol (DESIGN section 4)
    status        VARCHAR NOT NULL,      -- queued | running | done | failed | diverged | pruned (tuning)
    n_params      BIGINT,                -- all parameters (tied head counted once)
    n_trainable   BIGINT,                -- parameters with requires_grad
    wall_s        DOUBLE,                -- wall-clock seconds of training
    tokens_per_s  DOUBLE,                -- mean training throughput, tokens per second
    tokens_seen   BIGINT,                -- training tokens actually consumed
    steps         BIGINT,                -- optimiser steps taken
    host          VARCHAR,
    code_version  VARCHAR,               -- git commit, with '-dirty' appended if the tree was dirty
    config        JSON,                  -- the full run config (what protocol_hash hashes, and more)
    error         VARCHAR,               -- failure message (status failed/diverged; pruned: where and why)
    diverged_step BIGINT,                -- step at which the loss became non-finite
    started_at    TIMESTAMP,             -- UTC
    finished_at   TIMESTAMP,             -- UTC
    torch_version VARCHAR,
    owner         VARCHAR,               -- host:pid of the writer (the worker holding the run's lease)
    epoch         BIGINT,                -- the writer's fencing epoch (grows with every new owner; NULL: by hand)
    train_s       DOUBLE,                -- seconds inside optimiser steps (fwd, bwd, clip, AdamW), all segments
    eval_s        DOUBLE,                -- seconds in evaluations (validation NLL + routing diagnostics)
    setup_s       DOUBLE,                -- seconds from the start of a segment to its first step, summed
    ckpt_s        DOUBLE,                -- seconds writing checkpoints; wall_s - the four = data, hooks, wind-down
    epochs        DOUBLE,                -- training tokens / train-split tokens (> 1: data seen again)
    micro_batch_size INTEGER,            -- sequences per forward+backward on one rank (execution setting, DESIGN 11)
    world_size    INTEGER,               -- ranks that trained the run (execution setting, outside the protocol hash)
    compiled      BOOLEAN,               -- every training forward ran under torch.compile (false: eager, or a fall-back
                                         -- to eager); NULL in result files written before it was recorded
    compile_graphs INTEGER,              -- graphs inductor compiled for the run on rank 0 (DDP's optimiser: one per
                                         -- gradient bucket); NULL when not compiled
    unigram_nll   DOUBLE,                -- nats/token: the validation targets under the train split's unigram
                                         -- distribution (add-one smoothed), the plateau (harness/data/unigram.py)
    hardware      VARCHAR,               -- hardware class: what changes numerics (device/precision/torch/compile,
                                         -- DESIGN 13); 'unknown' for result files written before it was recorded
    environment   JSON,                  -- the environment record: CPU and ISA, GPU, driver, CUDA, versions, flags,
                                         -- training commit (harness/train/environment.py); no host name, no path
    numerics      VARCHAR                -- the training code's numerics identifier, e.g. two_phase/2, per_site/1
                                         -- (harness/models/numerics.py, DESIGN 13); NULL in result files written
                                         -- before it was recorded (the report reads what their commit implies)
);

-- Scalar curves. train: loss, lr, grad_norm, tokens_per_s; val: nll (nats/token), bpb, ppl.
CREATE TABLE IF NOT EXISTS metrics (
    run_id VARCHAR NOT NULL,
    step   BIGINT  NOT NULL,             -- optimiser step at which the value was measured
    tokens BIGINT  NOT NULL,             -- training tokens seen at that point
    split  VARCHAR NOT NULL,             -- train | val
    name   VARCHAR NOT NULL,
    value  DOUBLE                        -- may be NaN/inf for a diverged run
);

-- Routing diagnostics (DESIGN section 3): the mean depth distribution of each route over its
-- sources, one row per source. entropy (nats), eff_depth (sum_i i * a_i) and the Jensen-Shannon
-- divergences (nats) belong to (run_id, tokens, layer, site, route) and are repeated on each
-- source row; js_* are NULL for variants without separate QK and V routes.
CREATE TABLE IF NOT EXISTS routing (
    run_id           VARCHAR NOT NULL,
    tokens           BIGINT  NOT NULL,   -- training tokens seen when measured
    layer            INTEGER NOT NULL,   -- 0-based layer; the output route uses layer = n_layers
    site             VARCHAR NOT NULL,   -- attn | mlp | out
    route            VARCHAR NOT NULL,   -- e.g. qk, v, mlp, out
    source           INTEGER NOT NULL,   -- 0-based source index (0 = token embedding)
    weight           DOUBLE  NOT NULL,   -- mean softmax weight a_i over tokens
    entropy          DOUBLE,             -- entropy of the mean distribution, nats
    token_entropy    DOUBLE,             -- per-token entropy averaged over tokens, nats
    eff_depth        DOUBLE,             -- sum_i i * a_i
    js_qk_v          DOUBLE,             -- JS(QK route, V route) per token, then averaged, nats
    js_qk_v_of_means DOUBLE              -- JS between the two token-averaged distributions, nats
);

-- Degeneracy records (DESIGN section 3, "A control that cannot differ from the parent is not a
-- control"), at each evaluation: one row per layer, site and pair of that site's routes (none for
-- a site with one route). Two routes whose summed queries and offsets stay within 1e-6 at every
-- layer compute the same route: a control whose routes do so is the parent in disguise.
CREATE TABLE IF NOT EXISTS route_pairs (
    run_id              VARCHAR NOT NULL,
    tokens              BIGINT  NOT NULL,   -- training tokens seen when measured
    layer               INTEGER NOT NULL,   -- 0-based layer; the output site uses layer = n_layers
    site                VARCHAR NOT NULL,   -- attn | mlp | out
    route_a             VARCHAR NOT NULL,   -- e.g. qk
    route_b             VARCHAR NOT NULL,   -- e.g. dup
    query_max_abs_diff  DOUBLE,             -- max over D of |w_a - w_b|, the routes' summed pseudo-queries
    offset_max_abs_diff DOUBLE,             -- max over D of |b_a - b_b|, their offsets (none = 0)
    js                  DOUBLE              -- JS(route a, route b) per token, then averaged, nats
);

-- Degeneracy records, at each evaluation: every trainable routing parameter (pseudo-query w_*,
-- offset b_*; the only parameters a variant spec can add) and how far it moved from its initial
-- value. The parameters a control adds are those of its rows that its parent's rows lack.
CREATE TABLE IF NOT EXISTS route_params (
    run_id         VARCHAR NOT NULL,
    tokens         BIGINT  NOT NULL,        -- training tokens seen when measured
    layer          INTEGER NOT NULL,        -- layer of the parameter's site (output site: n_layers)
    site           VARCHAR NOT NULL,        -- attn | mlp | out
    name           VARCHAR NOT NULL,        -- leaf name, e.g. w_qk, w_dup, b_qk
    numel          BIGINT,                  -- number of elements (D)
    max_abs_change DOUBLE,                  -- max over elements of |value - initial value|
    max_abs_value  DOUBLE                   -- max over elements of |value|
);

-- `harness bench` rows (DESIGN section 7); one benchmark invocation shares one bench_id.
CREATE TABLE IF NOT EXISTS bench (
    bench_id      VARCHAR NOT NULL,
    created_at    TIMESTAMP,             -- UTC
    host          VARCHAR,
    torch_version VARCHAR,
    threads       INTEGER,
    compile       BOOLEAN,
    size          VARCHAR,
    variant       VARCHAR,
    step_ms       DOUBLE,                -- median milliseconds per training step
    peak_mem_mb   DOUBLE,
    tokens_per_s  DOUBLE,
    extra         JSON
);

-- Bookkeeping: which result file was ingested in which state. A file whose (size_bytes,
-- mtime_ns, inode) differ from its row here is pending. error is set (and the file skipped)
-- when the file could not be parsed or validated.
CREATE TABLE IF NOT EXISTS ingest_log (
    file        VARCHAR PRIMARY KEY,     -- name inside RESULTS/runs/
    run_id      VARCHAR,
    size_bytes  BIGINT,
    mtime_ns    BIGINT,
    inode       BIGINT,
    ingested_at TIMESTAMP,               -- UTC
    error       VARCHAR
);

CREATE TABLE IF NOT EXISTS meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR
);

-- One row per finished (status 'done') run with its end-of-run validation metrics: the 'val'
-- rows at the run's largest validation `tokens` value (ties on tokens: the largest step).
-- Columns after protocol_hash are additions to the DESIGN section 5 contract.
CREATE OR REPLACE VIEW final AS
WITH last_val AS (
    SELECT run_id, max(tokens) AS val_tokens
    FROM metrics
    WHERE split = 'val'
    GROUP BY run_id
),
val AS (
    SELECT m.run_id,
           l.val_tokens,
           arg_max(m.value, m.step) FILTER (WHERE m.name = 'nll') AS val_nll,
           arg_max(m.value, m.step) FILTER (WHERE m.name = 'bpb') AS val_bpb,
           arg_max(m.value, m.step) FILTER (WHERE m.name = 'ppl') AS val_ppl
    FROM metrics m
    JOIN last_val l ON m.run_id = l.run_id AND m.tokens = l.val_tokens
    WHERE m.split = 'val'
    GROUP BY m.run_id, l.val_tokens
)
SELECT r.run_id, r.grid, r.variant, r.role, r.seed, r.size, r.budget_tokens, r.protocol_hash,
       v.val_nll, v.val_bpb, v.val_ppl,
       v.val_tokens, r.code_version, r.n_params, r.n_trainable, r.tokens_seen, r.wall_s,
       r.tokens_per_s
FROM runs r
LEFT JOIN val v ON v.run_id = r.run_id
WHERE r.status = 'done';
