/*
 * Calls every mcpts_* entry point, error paths included. Driven by tests/ffi.rs, plain
 * and under valgrind. Exits 0 when every check holds, 1 at the first one that does not.
 */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mcp_task_store.h"

#define FAIL(...)                                                                       \
    do {                                                                                \
        fprintf(stderr, "smoke.c:%d: ", __LINE__);                                      \
        fprintf(stderr, __VA_ARGS__);                                                   \
        fprintf(stderr, "\n");                                                          \
        exit(1);                                                                        \
    } while (0)

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) FAIL("check failed: %s", #cond);                                   \
    } while (0)

/* Runs `call`, which must return `want`. */
#define EXPECT(want, call)                                                              \
    do {                                                                                \
        mcpts_result got_ = (call);                                                     \
        if (got_ != (want)) {                                                           \
            char msg_[256];                                                             \
            mcpts_last_error(msg_, sizeof msg_);                                        \
            FAIL("%s returned %s, want %s (last error: %s)", #call,                     \
                 mcpts_result_name(got_), mcpts_result_name(want), msg_);               \
        }                                                                               \
    } while (0)

#define OK(call) EXPECT(MCPTS_RESULT_OK, call)

/* The calling thread's last error must contain `needle`. */
static void expect_error_mentions(const char *needle, int line) {
    char msg[512];
    size_t n = mcpts_last_error(msg, sizeof msg);
    if (n == 0 || strstr(msg, needle) == NULL) {
        fprintf(stderr, "smoke.c:%d: last error '%s' lacks '%s'\n", line, msg, needle);
        exit(1);
    }
}
#define MENTIONS(needle) expect_error_mentions((needle), __LINE__)

/* A pointer no allocator returns, to show failed calls leave out-params alone. */
#define SENTINEL ((void *)0x1)

static const uint8_t *u8(const char *s) { return (const uint8_t *)s; }

/* Takes ownership of `bytes`: checks it holds `needle`, then frees it. */
static void expect_json(mcpts_bytes *bytes, const char *needle, int line) {
    const char *text = mcpts_bytes_data(bytes);
    if (text == NULL || strlen(text) != mcpts_bytes_len(bytes) || strstr(text, needle) == NULL) {
        fprintf(stderr, "smoke.c:%d: JSON %s lacks %s\n", line, text ? text : "(null)", needle);
        exit(1);
    }
    mcpts_bytes_free(bytes);
}
/* ... and resets the variable, so later checks can tell whether a call wrote to it. */
#define JSON_HAS(bytes, needle)                                                         \
    do {                                                                                \
        expect_json((bytes), (needle), __LINE__);                                       \
        (bytes) = SENTINEL;                                                             \
    } while (0)

/* Creates a task from `request` and copies its id (a 36-character UUID) into `id`. */
static void create_task(const mcpts_handle *h, const char *request, char id[37]) {
    mcpts_bytes *task = NULL;
    OK(mcpts_handle_create(h, u8(request), strlen(request), &task));
    const char *found = strstr(mcpts_bytes_data(task), "\"taskId\":\"");
    CHECK(found != NULL);
    memcpy(id, found + strlen("\"taskId\":\""), 36);
    id[36] = '\0';
    CHECK(strstr(mcpts_bytes_data(task), "\"status\":\"working\"") != NULL);
    mcpts_bytes_free(task);
}

/* Walks every page of `session`'s tasks; returns how many there are. */
static int count_tasks(const mcpts_handle *h, const char *session) {
    int n = 0;
    char cursor[256] = "";
    for (;;) {
        mcpts_bytes *page = NULL;
        OK(mcpts_handle_list(h, session, cursor[0] ? cursor : NULL, &page));
        const char *text = mcpts_bytes_data(page);
        for (const char *p = text; (p = strstr(p, "\"taskId\"")) != NULL; p++) n++;
        const char *next = strstr(text, "\"nextCursor\":\"");
        if (next == NULL) {
            mcpts_bytes_free(page);
            return n;
        }
        next += strlen("\"nextCursor\":\"");
        size_t len = strcspn(next, "\"");
        CHECK(len < sizeof cursor);
        memcpy(cursor, next, len);
        cursor[len] = '\0';
        mcpts_bytes_free(page);
    }
}

struct waiter {
    mcpts_handle *handle;
    const char *task_id;
    mcpts_result result;
};

static void *wait_forever(void *arg) {
    struct waiter *w = arg;
    mcpts_bytes *task = SENTINEL;
    w->result = mcpts_handle_wait(w->handle, w->task_id, NULL, MCPTS_WAIT_FOREVER, &task);
    if (task != SENTINEL) w->result = MCPTS_RESULT_PANIC; /* written on failure: a bug */
    return NULL;
}

/* Reads the subscription's next event (waiting at most 5 s): it must be of `type` and
   hold `needle`. */
static void expect_event(mcpts_events *events, const char *type, const char *needle, int line) {
    mcpts_bytes *event = SENTINEL;
    mcpts_result rc = mcpts_events_next(events, 5000, &event);
    if (rc != MCPTS_RESULT_OK) {
        fprintf(stderr, "smoke.c:%d: events_next returned %s\n", line, mcpts_result_name(rc));
        exit(1);
    }
    char kind[64];
    snprintf(kind, sizeof kind, "{\"type\":\"%s\",", type);
    if (strncmp(mcpts_bytes_data(event), kind, strlen(kind)) != 0) {
        fprintf(stderr, "smoke.c:%d: event %s is not a %s\n", line, mcpts_bytes_data(event), type);
        exit(1);
    }
    expect_json(event, needle, line);
}
#define EVENT(events, type, needle) expect_event((events), (type), (needle), __LINE__)

struct reader {
    mcpts_events *events;
    atomic_int seen; /* read by the main thread while this one runs */
    mcpts_result result;
};

/* Reads events, never timing out, until a call fails; records how many and the failure. */
static void *read_until_closed(void *arg) {
    struct reader *r = arg;
    for (;;) {
        mcpts_bytes *event = SENTINEL;
        mcpts_result rc = mcpts_events_next(r->events, MCPTS_WAIT_FOREVER, &event);
        if (rc != MCPTS_RESULT_OK) {
            r->result = event == SENTINEL ? rc : MCPTS_RESULT_PANIC; /* written on failure */
            return NULL;
        }
        r->seen++;
        mcpts_bytes_free(event);
    }
}

/* Spins until `done` holds, failing after 10 s: waits on a condition another thread makes
   true, never for a guessed while. */
#define SPIN_UNTIL(done, what)                                                          \
    do {                                                                                \
        struct timespec start_, now_;                                                   \
        CHECK(clock_gettime(CLOCK_MONOTONIC, &start_) == 0);                            \
        while (!(done)) {                                                               \
            CHECK(clock_gettime(CLOCK_MONOTONIC, &now_) == 0);                          \
            if (now_.tv_sec - start_.tv_sec > 10) FAIL("%s within 10 s", (what));       \
            sched_yield();                                                              \
        }                                                                               \
    } while (0)

/* Whether the store counts a caller parked in a wait. */
static int someone_waits(const mcpts_handle *h) {
    mcpts_bytes *stats = NULL;
    OK(mcpts_handle_stats(h, &stats));
    int waits = strstr(mcpts_bytes_data(stats), "\"waiters\":0,") == NULL;
    mcpts_bytes_free(stats);
    return waits;
}

static void result_names(void) {
    CHECK(strcmp(mcpts_result_name(MCPTS_RESULT_OK), "MCPTS_RESULT_OK") == 0);
    CHECK(strcmp(mcpts_result_name(MCPTS_RESULT_NOT_FOUND), "MCPTS_RESULT_NOT_FOUND") == 0);
    CHECK(strcmp(mcpts_result_name(MCPTS_RESULT_TIMEOUT), "MCPTS_RESULT_TIMEOUT") == 0);
    CHECK(strcmp(mcpts_result_name(9999), "MCPTS_RESULT_UNKNOWN") == 0);
}

static void bytes_and_last_error_edges(void) {
    mcpts_bytes_free(NULL);
    CHECK(mcpts_bytes_data(NULL) == NULL);
    CHECK(mcpts_bytes_len(NULL) == 0);
    mcpts_store_free(NULL);
    mcpts_handle_free(NULL);
    mcpts_events_free(NULL);

    /* A failure sets the last error; it can be measured, truncated, and read again. */
    mcpts_store *store = SENTINEL;
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_store_new(NULL, 0, &store));
    CHECK(store == SENTINEL);
    size_t n = mcpts_last_error(NULL, 0);
    CHECK(n == strlen("argument 'config_json' is NULL"));
    char small[8];
    CHECK(mcpts_last_error(small, sizeof small) == n);
    CHECK(strcmp(small, "argumen") == 0);
    MENTIONS("config_json");
}

static void store_new_errors(void) {
    mcpts_store *store = SENTINEL;
    const char *ok = "{}";
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_store_new(u8(ok), strlen(ok), NULL));
    MENTIONS("store_out");
    const char *cases[][2] = {
        {"{", "syntax"},
        {"{\"ttl\": 5}", "unknown field `ttl`"},
        {"{\"default_ttl\": \"soon\"}", "soon"},
        {"{\"page_size\": 0}", "page_size"},
        {"{\"default_ttl\": \"2h\", \"max_ttl\": \"1h\"}", "default_ttl"},
        {"{\"expiry\": \"later\"}", "later"},
        {"{\"expiry\": {\"policy\": \"remove\", \"grace\": \"1s\"}}", "grace"},
        {"[1, 2]", "store configuration"},
        {"{\"journal\": {\"dir\": \"\"}}", "journal.dir"},
        {"{\"journal\": {\"dir\": \"x\", \"durability\": \"later\"}}", "later"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mcpts_result r = mcpts_store_new(u8(cases[i][0]), strlen(cases[i][0]), &store);
        mcpts_result want = i == 0 ? MCPTS_RESULT_INVALID_JSON : MCPTS_RESULT_INVALID_CONFIG;
        if (r != want) FAIL("config %s gave %s", cases[i][0], mcpts_result_name(r));
        if (i > 0) MENTIONS(cases[i][1]);
        CHECK(store == SENTINEL);
    }
}

/* Removes the (flat) directory `dir` and what it holds. */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *entry;
    char path[512];
    while ((entry = readdir(d)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, entry->d_name);
        CHECK(unlink(path) == 0);
    }
    closedir(d);
    CHECK(rmdir(dir) == 0);
}

/* A store with a journal: a task created before mcpts_store_free is there after a new
 * mcpts_store_new on the same directory; a second store on it meanwhile is refused. */
static void journal_survives_free(void) {
    char dir[] = "/tmp/mcpts-smoke-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char config[256];
    snprintf(config, sizeof config, "{\"journal\": {\"dir\": \"%s\", \"durability\": \"flush\"}}",
             dir);
    mcpts_store *store = NULL, *other = SENTINEL;
    mcpts_handle *h = NULL;
    char id[37];
    OK(mcpts_store_new(u8(config), strlen(config), &store));
    OK(mcpts_store_handle(store, &h));
    create_task(h, "{}", id);
    EXPECT(MCPTS_RESULT_JOURNAL, mcpts_store_new(u8(config), strlen(config), &other));
    MENTIONS("in use");
    CHECK(other == SENTINEL);
    mcpts_handle_free(h);
    mcpts_store_free(store);

    OK(mcpts_store_new(u8(config), strlen(config), &store));
    OK(mcpts_store_handle(store, &h));
    mcpts_bytes *task = NULL;
    OK(mcpts_handle_get(h, id, NULL, &task));
    /* It was running when its store went away: failed on recovery, as the default says. */
    expect_json(task, "\"status\":\"failed\"", __LINE__);
    mcpts_handle_free(h);
    mcpts_store_free(store);
    remove_dir(dir);
}

int main(void) {
    result_names();
    bytes_and_last_error_edges();
    store_new_errors();
    journal_survives_free();

    const char *config =
        "{\"default_ttl\": \"10m\", \"max_ttl\": 3600000, \"poll_interval\": \"250ms\","
        " \"page_size\": 2, \"max_tasks\": 100, \"max_tasks_per_session\": 50,"
        " \"expiry\": {\"policy\": \"fail\", \"grace\": \"5s\"}}";
    mcpts_store *store = NULL;
    OK(mcpts_store_new(u8(config), strlen(config), &store));
    CHECK(mcpts_last_error(NULL, 0) == 0); /* success clears it */

    mcpts_handle *h = SENTINEL, *h2 = SENTINEL;
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_store_handle(NULL, &h));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_store_handle(store, NULL));
    CHECK(h == SENTINEL);
    OK(mcpts_store_handle(store, &h));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_clone(NULL, &h2));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_clone(h, NULL));
    CHECK(h2 == SENTINEL);
    OK(mcpts_handle_clone(h, &h2));

    /* subscribe: one subscription read along the way, one never read (freed at the end) */
    mcpts_events *ev = SENTINEL, *unread = NULL;
    mcpts_bytes *event = SENTINEL;
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_subscribe(NULL, &ev));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_subscribe(h, NULL));
    CHECK(ev == SENTINEL);
    OK(mcpts_handle_subscribe(h, &ev));
    OK(mcpts_handle_subscribe(h2, &unread));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_events_next(NULL, 0, &event));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_events_next(ev, 0, NULL));
    EXPECT(MCPTS_RESULT_TIMEOUT, mcpts_events_next(ev, 0, &event));
    EXPECT(MCPTS_RESULT_TIMEOUT, mcpts_events_next(ev, 20, &event));
    MENTIONS("no event");
    CHECK(event == SENTINEL);

    /* create */
    mcpts_bytes *out = SENTINEL;
    const char *req = "{\"ttl\": 60000, \"origin\": {\"method\": \"tools/call\"}}";
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_create(NULL, u8(req), strlen(req), &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_create(h, NULL, 0, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_create(h, u8(req), strlen(req), NULL));
    EXPECT(MCPTS_RESULT_INVALID_JSON, mcpts_handle_create(h, u8("{\"ttl\":"), 7, &out));
    EXPECT(MCPTS_RESULT_INVALID_ARGUMENT, mcpts_handle_create(h, u8("{\"tll\":1}"), 9, &out));
    MENTIONS("unknown field `tll`");
    EXPECT(MCPTS_RESULT_INVALID_ARGUMENT, mcpts_handle_create(h, u8("{\"ttl\":-1}"), 10, &out));
    CHECK(out == SENTINEL);
    OK(mcpts_handle_create(h, u8(req), strlen(req), &out));
    CHECK(out != SENTINEL);
    JSON_HAS(out, "\"ttl\":60000");

    char a[37], b[37], c[37], s1[37];
    create_task(h, "{}", a);
    create_task(h2, "{\"ttl\": null, \"session\": null}", b);
    create_task(h, "{\"ttl\": 0}", c);
    create_task(h, "{\"session\": \"s1\"}", s1);
    EVENT(ev, "created", "\"ttl\":60000");
    EVENT(ev, "created", a);
    EVENT(ev, "created", b);
    EVENT(ev, "created", "\"session\":null}");
    EVENT(ev, "created", "\"session\":\"s1\"}");

    /* get */
    out = SENTINEL;
    OK(mcpts_handle_get(h, a, NULL, &out));
    JSON_HAS(out, "\"pollInterval\":250");
    OK(mcpts_handle_get(h, s1, "s1", &out));
    JSON_HAS(out, "\"ttl\":600000"); /* the default TTL */
    out = SENTINEL;
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_get(NULL, a, NULL, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_get(h, NULL, NULL, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_get(h, a, NULL, NULL));
    EXPECT(MCPTS_RESULT_NOT_FOUND,
           mcpts_handle_get(h, "00000000-0000-4000-8000-000000000000", NULL, &out));
    EXPECT(MCPTS_RESULT_NOT_FOUND, mcpts_handle_get(h, "not-a-uuid", NULL, &out));
    EXPECT(MCPTS_RESULT_NOT_FOUND, mcpts_handle_get(h, a, "s1", &out));  /* foreign */
    EXPECT(MCPTS_RESULT_NOT_FOUND, mcpts_handle_get(h, s1, NULL, &out)); /* strict */
    EXPECT(MCPTS_RESULT_INVALID_ARGUMENT, mcpts_handle_get(h, a, "\xff", &out));
    MENTIONS("UTF-8");
    CHECK(out == SENTINEL);

    /* update status */
    EXPECT(MCPTS_RESULT_NULL_PARAMETER,
           mcpts_handle_update_status(NULL, a, NULL, "working", NULL, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER,
           mcpts_handle_update_status(h, a, NULL, NULL, NULL, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER,
           mcpts_handle_update_status(h, a, NULL, "working", NULL, NULL));
    EXPECT(MCPTS_RESULT_INVALID_ARGUMENT,
           mcpts_handle_update_status(h, a, NULL, "sleeping", NULL, &out));
    MENTIONS("sleeping");
    EXPECT(MCPTS_RESULT_NOT_FOUND,
           mcpts_handle_update_status(h, a, "s1", "working", NULL, &out));
    CHECK(out == SENTINEL);
    OK(mcpts_handle_update_status(h, a, NULL, "working", "step 1 of 3", &out));
    JSON_HAS(out, "\"statusMessage\":\"step 1 of 3\"");
    EVENT(ev, "status", "\"statusMessage\":\"step 1 of 3\"");

    /* input requests */
    const char *ask = "{\"ask-1\": {\"method\": \"elicitation/create\", \"params\": {}}}";
    const char *answer = "{\"ask-1\": {\"action\": \"accept\"}, \"stray\": 1}";
    EXPECT(MCPTS_RESULT_NULL_PARAMETER,
           mcpts_handle_set_input_requests(NULL, a, NULL, u8(ask), strlen(ask), &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER,
           mcpts_handle_set_input_requests(h, a, NULL, NULL, 0, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER,
           mcpts_handle_set_input_requests(h, a, NULL, u8(ask), strlen(ask), NULL));
    EXPECT(MCPTS_RESULT_INVALID_JSON, mcpts_handle_set_input_requests(h, a, NULL, u8("{"), 1, &out));
    EXPECT(MCPTS_RESULT_INVALID_ARGUMENT,
           mcpts_handle_set_input_requests(h, a, NULL, u8("[1]"), 3, &out));
    CHECK(out == SENTINEL);
    OK(mcpts_handle_set_input_requests(h, a, NULL, u8(ask), strlen(ask), &out));
    JSON_HAS(out, "\"status\":\"input_required\"");
    EXPECT(MCPTS_RESULT_INPUT_KEY_REUSED,
           mcpts_handle_set_input_requests(h, a, NULL, u8(ask), strlen(ask), &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_wait_input(h, a, NULL, NULL, 0, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_wait_input(NULL, a, NULL, "ask-1", 0, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_wait_input(h, a, NULL, "ask-1", 0, NULL));
    EXPECT(MCPTS_RESULT_TIMEOUT, mcpts_handle_wait_input(h, a, NULL, "ask-1", 20, &out));
    EXPECT(MCPTS_RESULT_UNKNOWN_INPUT_KEY, mcpts_handle_wait_input(h, a, NULL, "nope", 0, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER,
           mcpts_handle_resolve_input(NULL, a, NULL, u8(answer), strlen(answer), &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_resolve_input(h, a, NULL, NULL, 0, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER,
           mcpts_handle_resolve_input(h, a, NULL, u8(answer), strlen(answer), NULL));
    EXPECT(MCPTS_RESULT_INVALID_JSON, mcpts_handle_resolve_input(h, a, NULL, u8("nul"), 3, &out));
    EXPECT(MCPTS_RESULT_NOT_FOUND,
           mcpts_handle_resolve_input(h, b, "s1", u8(answer), strlen(answer), &out));
    CHECK(out == SENTINEL);
    OK(mcpts_handle_resolve_input(h, a, NULL, u8(answer), strlen(answer), &out));
    JSON_HAS(out, "\"status\":\"working\"");
    OK(mcpts_handle_wait_input(h, a, NULL, "ask-1", MCPTS_WAIT_FOREVER, &out));
    JSON_HAS(out, "\"action\":\"accept\"");

    /* dispatch: raw JSON-RPC tasks requests in either revision */
    {
        char get2025[256], get2026[512];
        snprintf(get2025, sizeof get2025,
                 "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tasks/get\",\"params\":{\"taskId\":\"%s\"}}", a);
        snprintf(get2026, sizeof get2026,
                 "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"tasks/get\",\"params\":{\"taskId\":\"%s\","
                 "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                 "\"io.modelcontextprotocol/clientCapabilities\":{\"extensions\":"
                 "{\"io.modelcontextprotocol/tasks\":{}}}}}}", a);
        const char *unknown = "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tasks/get\",\"params\":{\"taskId\":\"nope\"}}";
        const char *other = "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/list\"}";
        const char *notification = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
        const char *garbage = "{oops";
        EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_dispatch(NULL, u8(get2025), strlen(get2025), NULL, &out));
        EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_dispatch(h, NULL, 0, NULL, &out));
        EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_dispatch(h, u8(get2025), strlen(get2025), NULL, NULL));
        EXPECT(MCPTS_RESULT_INVALID_ARGUMENT, mcpts_handle_dispatch(h, u8("\xff\xfe"), 2, NULL, &out));
        CHECK(out == SENTINEL);
        OK(mcpts_handle_dispatch(h, u8(get2025), strlen(get2025), NULL, &out));
        JSON_HAS(out, "\"ttl\":"); /* 2025-11-25 names it ttl, SEP-2663 ttlMs */
        OK(mcpts_handle_dispatch(h, u8(get2026), strlen(get2026), NULL, &out));
        JSON_HAS(out, "\"resultType\":\"complete\"");
        OK(mcpts_handle_dispatch(h, u8(unknown), strlen(unknown), NULL, &out));
        JSON_HAS(out, "-32602");
        OK(mcpts_handle_dispatch(h, u8(other), strlen(other), NULL, &out));
        JSON_HAS(out, "-32601");
        OK(mcpts_handle_dispatch(h, u8(garbage), strlen(garbage), NULL, &out));
        JSON_HAS(out, "-32700");
        out = SENTINEL;
        OK(mcpts_handle_dispatch(h, u8(notification), strlen(notification), NULL, &out));
        CHECK(out == NULL);
        out = SENTINEL;

        /* dispatch_timeout: a tasks/result on a running task answers -32603 at the timeout */
        char result2025[256];
        snprintf(result2025, sizeof result2025,
                 "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tasks/result\",\"params\":{\"taskId\":\"%s\"}}", a);
        EXPECT(MCPTS_RESULT_NULL_PARAMETER,
               mcpts_handle_dispatch_timeout(NULL, u8(result2025), strlen(result2025), NULL, 0, &out));
        EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_dispatch_timeout(h, NULL, 0, NULL, 0, &out));
        EXPECT(MCPTS_RESULT_NULL_PARAMETER,
               mcpts_handle_dispatch_timeout(h, u8(result2025), strlen(result2025), NULL, 0, NULL));
        CHECK(out == SENTINEL);
        OK(mcpts_handle_dispatch_timeout(h, u8(result2025), strlen(result2025), NULL, 20, &out));
        JSON_HAS(out, "{\"code\":-32603,\"message\":\"Timed out waiting on the task\"}");
        OK(mcpts_handle_dispatch_timeout(h, u8(get2025), strlen(get2025), NULL, MCPTS_WAIT_FOREVER, &out));
        JSON_HAS(out, "\"status\":\"working\"");
    }

    /* results */
    const char *result = "{\"result\": {\"content\": [], \"isError\": false}, \"message\": \"done\"}";
    const char *error = "{\"error\": {\"code\": -32603, \"message\": \"boom\"}}";
    EXPECT(MCPTS_RESULT_NO_RESULT, mcpts_handle_get_result(h, a, NULL, &out));
    EXPECT(MCPTS_RESULT_TIMEOUT, mcpts_handle_wait(h, a, NULL, 20, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER,
           mcpts_handle_store_result(NULL, a, NULL, u8(result), strlen(result), &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_store_result(h, a, NULL, NULL, 0, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER,
           mcpts_handle_store_result(h, a, NULL, u8(result), strlen(result), NULL));
    EXPECT(MCPTS_RESULT_INVALID_JSON, mcpts_handle_store_result(h, a, NULL, u8("{]"), 2, &out));
    const char *both = "{\"result\": {}, \"error\": {}}";
    EXPECT(MCPTS_RESULT_INVALID_ARGUMENT,
           mcpts_handle_store_result(h, a, NULL, u8(both), strlen(both), &out));
    MENTIONS("exactly one");
    const char *cancelled = "{\"status\": \"cancelled\", \"result\": {}}";
    EXPECT(MCPTS_RESULT_INVALID_ARGUMENT,
           mcpts_handle_store_result(h, a, NULL, u8(cancelled), strlen(cancelled), &out));
    CHECK(out == SENTINEL);
    OK(mcpts_handle_store_result(h, a, NULL, u8(result), strlen(result), &out));
    JSON_HAS(out, "\"status\":\"completed\"");
    EXPECT(MCPTS_RESULT_ALREADY_TERMINAL,
           mcpts_handle_store_result(h, a, NULL, u8(error), strlen(error), &out));
    EXPECT(MCPTS_RESULT_INVALID_TRANSITION,
           mcpts_handle_update_status(h, a, NULL, "working", NULL, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_get_result(NULL, a, NULL, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_get_result(h, a, NULL, NULL));
    CHECK(out == SENTINEL);
    OK(mcpts_handle_get_result(h, a, NULL, &out));
    JSON_HAS(out, "\"result\":{\"content\":[],\"isError\":false}");
    OK(mcpts_handle_wait(h, a, NULL, MCPTS_WAIT_FOREVER, &out));
    JSON_HAS(out, "\"statusMessage\":\"done\"");
    OK(mcpts_handle_store_result(h, b, NULL, u8(error), strlen(error), &out));
    JSON_HAS(out, "\"status\":\"failed\"");
    OK(mcpts_handle_get_result(h, b, NULL, &out));
    JSON_HAS(out, "\"error\":{\"code\":-32603,\"message\":\"boom\"}");
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_wait(NULL, a, NULL, 0, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_wait(h, a, NULL, 0, NULL));
    EXPECT(MCPTS_RESULT_NOT_FOUND, mcpts_handle_wait(h, "x", NULL, 0, &out));

    /* cancel */
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_cancel(NULL, c, NULL, NULL, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_cancel(h, NULL, NULL, NULL, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_cancel(h, c, NULL, NULL, NULL));
    EXPECT(MCPTS_RESULT_NOT_FOUND, mcpts_handle_cancel(h, c, "s1", NULL, &out));
    CHECK(out == SENTINEL);
    OK(mcpts_handle_cancel(h, c, NULL, "user asked", &out));
    JSON_HAS(out, "\"cancelled\":true");
    OK(mcpts_handle_cancel(h, c, NULL, NULL, &out));
    JSON_HAS(out, "\"cancelled\":false");
    EXPECT(MCPTS_RESULT_NO_RESULT, mcpts_handle_get_result(h, c, NULL, &out));
    EXPECT(MCPTS_RESULT_ALREADY_TERMINAL, mcpts_handle_resolve_input(h, c, NULL, u8("{}"), 2, &out));

    /* list: 4 sessionless tasks over pages of 2, one in s1, none in s2 */
    CHECK(count_tasks(h, NULL) == 4);
    CHECK(count_tasks(h2, "s1") == 1);
    CHECK(count_tasks(h, "s2") == 0);
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_list(NULL, NULL, NULL, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_list(h, NULL, NULL, NULL));
    EXPECT(MCPTS_RESULT_INVALID_CURSOR, mcpts_handle_list(h, NULL, "garbage", &out));
    CHECK(out == SENTINEL);

    /* stats: the store's load, every session's tasks, nobody waiting */
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_stats(NULL, &out));
    EXPECT(MCPTS_RESULT_NULL_PARAMETER, mcpts_handle_stats(h, NULL));
    CHECK(out == SENTINEL);
    OK(mcpts_handle_stats(h2, &out));
    JSON_HAS(out, "\"waiters\":0,");

    /* limits, on a second store */
    const char *tight = "{\"max_tasks_per_session\": 1, \"expiry\": \"remove\"}";
    mcpts_store *store2 = NULL;
    mcpts_handle *h3 = NULL;
    OK(mcpts_store_new(u8(tight), strlen(tight), &store2));
    OK(mcpts_store_handle(store2, &h3));
    char t[37];
    create_task(h3, "{\"session\": \"s\"}", t);
    const char *again = "{\"session\": \"s\"}";
    EXPECT(MCPTS_RESULT_LIMIT_EXCEEDED, mcpts_handle_create(h3, u8(again), strlen(again), &out));
    MENTIONS("per session");
    mcpts_handle_free(h3);
    mcpts_store_free(store2);

    /* closing a subscription wakes its blocked reader with CLOSED; the store goes on */
    mcpts_events *closing = NULL;
    OK(mcpts_handle_subscribe(h2, &closing));
    struct reader stopped = {closing, 0, MCPTS_RESULT_OK};
    pthread_t stopping;
    CHECK(pthread_create(&stopping, NULL, read_until_closed, &stopped) == 0);
    char e[37];
    create_task(h, "{}", e);
    SPIN_UNTIL(atomic_load(&stopped.seen) == 1, "the reader did not get its event");
    mcpts_events_close(closing);
    CHECK(pthread_join(stopping, NULL) == 0);
    if (stopped.result != MCPTS_RESULT_CLOSED)
        FAIL("closed reader got %s", mcpts_result_name(stopped.result));
    create_task(h, "{}", e);
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_events_next(closing, 0, &event));
    MENTIONS("mcpts_events_close");
    mcpts_events_close(closing);
    mcpts_events_close(NULL);
    mcpts_events_free(closing);

    /* freeing the store wakes a blocked waiter and a blocked event reader with CLOSED
       (the reader after the one event queued for it) ... */
    mcpts_events *late = NULL;
    OK(mcpts_handle_subscribe(h2, &late));
    char d[37];
    create_task(h, "{}", d);
    struct waiter w = {h2, d, MCPTS_RESULT_OK};
    struct reader r = {late, 0, MCPTS_RESULT_OK};
    pthread_t thread, reading;
    CHECK(pthread_create(&thread, NULL, wait_forever, &w) == 0);
    CHECK(pthread_create(&reading, NULL, read_until_closed, &r) == 0);
    /* Free only once the waiter is parked and the reader has its event (it may not be
       blocked again yet; it then reads CLOSED without blocking, just the same). */
    SPIN_UNTIL(someone_waits(h), "the waiter did not park");
    SPIN_UNTIL(atomic_load(&r.seen) == 1, "the reader did not get its event");
    mcpts_store_free(store);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(pthread_join(reading, NULL) == 0);
    if (w.result != MCPTS_RESULT_CLOSED) FAIL("waiter got %s", mcpts_result_name(w.result));
    if (r.result != MCPTS_RESULT_CLOSED) FAIL("reader got %s", mcpts_result_name(r.result));
    CHECK(atomic_load(&r.seen) == 1);
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_events_next(late, MCPTS_WAIT_FOREVER, &event));
    MENTIONS("every event");
    CHECK(event == SENTINEL);
    mcpts_events_free(late);

    /* ... the events still queued are read after the store is gone, then CLOSED ... */
    int queued = 0;
    mcpts_result rc;
    while ((rc = mcpts_events_next(ev, MCPTS_WAIT_FOREVER, &event)) == MCPTS_RESULT_OK) {
        queued++;
        mcpts_bytes_free(event);
        event = SENTINEL;
    }
    if (rc != MCPTS_RESULT_CLOSED) FAIL("draining got %s", mcpts_result_name(rc));
    CHECK(queued > 0);
    mcpts_events_free(ev);
    mcpts_events_free(unread); /* a subscription freed with every event unread */

    /* ... and handles used afterwards report CLOSED, never crash */
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_handle_create(h, u8("{}"), 2, &out));
    MENTIONS("closed");
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_handle_get(h, d, NULL, &out));
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_handle_list(h2, NULL, NULL, &out));
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_handle_stats(h2, &out));
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_handle_wait(h2, d, NULL, MCPTS_WAIT_FOREVER, &out));
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_handle_cancel(h, d, NULL, NULL, &out));
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_handle_update_status(h, d, NULL, "failed", NULL, &out));
    const char *list = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tasks/list\"}";
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_handle_dispatch(h, u8(list), strlen(list), NULL, &out));
    CHECK(out == SENTINEL);
    mcpts_handle *h4 = SENTINEL;
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_handle_clone(h, &h4));
    CHECK(h4 == SENTINEL);
    mcpts_events *ev2 = SENTINEL;
    EXPECT(MCPTS_RESULT_CLOSED, mcpts_handle_subscribe(h, &ev2));
    CHECK(ev2 == SENTINEL);
    mcpts_handle_free(h2);
    mcpts_handle_free(h);

    printf("smoke.c: all checks passed\n");
    return 0;
}
