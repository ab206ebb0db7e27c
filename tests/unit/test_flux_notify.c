/*
 * test_flux_notify.c - the notification forwarder (fluxsource/notify.c):
 * the event body as notification-controller decodes it (fluxcd/pkg
 * apis/event/v1beta1), which answers are retried (connection errors and
 * 5xx but 501) and which never are (429 and every other 4xx), the bounded
 * queue dropping and counting instead of blocking, and the bounded drain at
 * stop.  The event endpoint is a scripted libmicrohttpd server on
 * 127.0.0.1 that can hold requests to simulate a slow receiver.
 */
#include <microhttpd.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <cjson/cJSON.h>

#include "base/clock.h"
#include "base/http.h"
#include "base/log.h"
#include "base/metrics.h"
#include "fluxsource/fluxsource.h"

/* ------------------------------------------------------------ the receiver */

struct receiver {
	struct MHD_Daemon *d;
	int port;
	char url[64];
	pthread_mutex_t lock;
	pthread_cond_t changed;
	unsigned script[16];       /* statuses answered in order; then 202 */
	int nscript;
	int requests;              /* requests whose body arrived */
	char bodies[16][4096];
	char ctype[16][64], method[16][8];
	int hold;                  /* requests wait while set */
};

static struct receiver R;

struct upload {
	char buf[8192];
	size_t len;
};

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
    const char *version, const char *data, size_t *size, void **st)
{
	struct upload *u = *st;
	struct MHD_Response *r;
	enum MHD_Result rc;
	unsigned status = 202;
	const char *ct;
	int i;

	(void)cls; (void)url; (void)version;
	if (u == NULL) {
		*st = calloc(1, sizeof(*u));
		return MHD_YES;
	}
	if (*size) {
		size_t n = *size < sizeof(u->buf) - 1 - u->len ? *size : sizeof(u->buf) - 1 - u->len;
		memcpy(u->buf + u->len, data, n);
		u->len += n;
		*size = 0;
		return MHD_YES;
	}
	ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	pthread_mutex_lock(&R.lock);
	i = R.requests;
	if (i < 16) {
		snprintf(R.bodies[i], sizeof(R.bodies[i]), "%s", u->buf);
		snprintf(R.ctype[i], sizeof(R.ctype[i]), "%s", ct ? ct : "");
		snprintf(R.method[i], sizeof(R.method[i]), "%s", method);
	}
	if (i < R.nscript)
		status = R.script[i];
	R.requests++;
	pthread_cond_broadcast(&R.changed);
	while (R.hold)
		pthread_cond_wait(&R.changed, &R.lock);
	pthread_mutex_unlock(&R.lock);
	r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static void completed(void *cls, struct MHD_Connection *c, void **st, enum MHD_RequestTerminationCode t)
{
	(void)cls; (void)c; (void)t;
	free(*st);
	*st = NULL;
}

static int setup(void **state)
{
	(void)state;
	memset(&R, 0, sizeof(R));
	pthread_mutex_init(&R.lock, NULL);
	pthread_cond_init(&R.changed, NULL);
	/* a thread per connection: a held request must not stop the daemon */
	R.d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
	    handle, NULL, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
	if (R.d == NULL)
		return -1;
	R.port = MHD_get_daemon_info(R.d, MHD_DAEMON_INFO_BIND_PORT)->port;
	snprintf(R.url, sizeof(R.url), "http://127.0.0.1:%d/", R.port);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	pthread_mutex_lock(&R.lock);
	R.hold = 0;
	pthread_cond_broadcast(&R.changed);
	pthread_mutex_unlock(&R.lock);
	MHD_stop_daemon(R.d);
	pthread_cond_destroy(&R.changed);
	pthread_mutex_destroy(&R.lock);
	return 0;
}

static void script(int n, ...)
{
	va_list ap;

	va_start(ap, n);
	pthread_mutex_lock(&R.lock);
	for (R.nscript = 0; R.nscript < n; R.nscript++)
		R.script[R.nscript] = va_arg(ap, unsigned);
	R.requests = 0;
	pthread_mutex_unlock(&R.lock);
	va_end(ap);
}

static void hold(int on)
{
	pthread_mutex_lock(&R.lock);
	R.hold = on;
	pthread_cond_broadcast(&R.changed);
	pthread_mutex_unlock(&R.lock);
}

static void wait_requests(int n)
{
	int64_t until = clock_mono_ms() + 20000;

	pthread_mutex_lock(&R.lock);
	while (R.requests < n && clock_mono_ms() < until) {
		pthread_mutex_unlock(&R.lock);
		clock_sleep_ms(5);
		pthread_mutex_lock(&R.lock);
	}
	assert_true(R.requests >= n);
	pthread_mutex_unlock(&R.lock);
}

static int requests(void)
{
	int n;

	pthread_mutex_lock(&R.lock);
	n = R.requests;
	pthread_mutex_unlock(&R.lock);
	return n;
}

/* ------------------------------------------------------------ helpers */

static const struct flux_notify_event STACK_EVENT = {
	"pulumi.com/v1", "Stack", "web", "apps", "0b6c1a9e-1111-4d5e-9f00-123456789abc", "4711",
	"Warning", "UpdateFailed", "pulumi up failed: exit status 255", "main@sha1:0123456789abcdef",
};

static struct flux_notify *start(size_t queue, int attempts)
{
	struct flux_notify_opts o;
	struct err e;
	struct flux_notify *n;

	flux_notify_opts_default(&o);
	o.url = R.url;
	o.instance = "pc-0";
	o.queue_size = queue;
	o.max_attempts = attempts;
	o.backoff_initial_ms = 10;
	o.backoff_max_ms = 40;
	n = flux_notify_start(&o, &e);
	assert_non_null(n);
	return n;
}

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The value of one series of the process's registry, read off the text
 * exposition as a scrape would. */
static double exposed(const char *series)
{
	char *text = NULL, *at;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	double v = -1;

	metrics_write(metrics_default(), f);
	fclose(f);
	at = strstr(text, series);
	if (at != NULL && at[strlen(series)] == ' ')
		v = strtod(at + strlen(series) + 1, NULL);
	free(text);
	return v;
}

/* ------------------------------------------------------------ the body */

static void body_has_every_field_of_the_go_type(void **state)
{
	char *s = flux_notify_event_json(&STACK_EVENT, "pulumi-controller", "pc-0", (time_t)1666941979);
	cJSON *b, *ref, *md;

	(void)state;
	assert_non_null(s);
	b = cJSON_Parse(s);
	assert_non_null(b);
	ref = cJSON_GetObjectItemCaseSensitive(b, "involvedObject");
	assert_string_equal(str(ref, "apiVersion"), "pulumi.com/v1");
	assert_string_equal(str(ref, "kind"), "Stack");
	assert_string_equal(str(ref, "name"), "web");
	assert_string_equal(str(ref, "namespace"), "apps");
	assert_string_equal(str(ref, "uid"), "0b6c1a9e-1111-4d5e-9f00-123456789abc");
	assert_string_equal(str(ref, "resourceVersion"), "4711");
	assert_string_equal(str(b, "severity"), "error");
	assert_string_equal(str(b, "reason"), "UpdateFailed");
	assert_string_equal(str(b, "message"), "pulumi up failed: exit status 255");
	assert_string_equal(str(b, "reportingController"), "pulumi-controller");
	assert_string_equal(str(b, "reportingInstance"), "pc-0");
	assert_string_equal(str(b, "timestamp"), "2022-10-28T07:26:19Z");
	md = cJSON_GetObjectItemCaseSensitive(b, "metadata");
	/* the server keeps only keys prefixed with the object's API group */
	assert_string_equal(str(md, "pulumi.com/revision"), "main@sha1:0123456789abcdef");
	assert_int_equal(cJSON_GetArraySize(md), 1);
	assert_int_equal(cJSON_GetArraySize(b), 8);
	cJSON_Delete(b);
	free(s);
}

static void normal_is_info_and_no_revision_no_metadata(void **state)
{
	struct flux_notify_event ev = STACK_EVENT;
	char *s;
	cJSON *b;

	(void)state;
	ev.type = "Normal";
	ev.revision = NULL;
	ev.uid = NULL;
	s = flux_notify_event_json(&ev, "pulumi-controller", NULL, 0);
	b = cJSON_Parse(s);
	assert_string_equal(str(b, "severity"), "info");
	assert_null(cJSON_GetObjectItemCaseSensitive(b, "metadata"));
	assert_null(cJSON_GetObjectItemCaseSensitive(b, "reportingInstance"));
	assert_null(str(cJSON_GetObjectItemCaseSensitive(b, "involvedObject"), "uid"));
	assert_string_equal(str(b, "timestamp"), "1970-01-01T00:00:00Z");
	cJSON_Delete(b);
	free(s);
	/* a core-group object ("v1") has no group to prefix a key with */
	ev.api_version = "v1";
	ev.revision = "r1";
	s = flux_notify_event_json(&ev, "pulumi-controller", NULL, 0);
	b = cJSON_Parse(s);
	assert_null(cJSON_GetObjectItemCaseSensitive(b, "metadata"));
	cJSON_Delete(b);
	free(s);
}

static void incomplete_events_are_not_sent(void **state)
{
	struct flux_notify_event ev = STACK_EVENT;

	(void)state;
	ev.name = "";
	assert_null(flux_notify_event_json(&ev, "c", NULL, 0));
	ev = STACK_EVENT;
	ev.namespace = NULL;
	assert_null(flux_notify_event_json(&ev, "c", NULL, 0));
	ev = STACK_EVENT;
	ev.kind = NULL;
	assert_null(flux_notify_event_json(&ev, "c", NULL, 0));
	ev = STACK_EVENT;
	ev.reason = NULL;
	assert_null(flux_notify_event_json(&ev, "c", NULL, 0));
}

static void message_is_cut_to_the_server_limit_on_a_character(void **state)
{
	size_t n = 40000, i;
	char *msg = malloc(n * 2 + 1), *s;
	struct flux_notify_event ev = STACK_EVENT;
	cJSON *b;
	const char *m;
	size_t chars = 0;

	(void)state;
	for (i = 0; i < n; i++)
		memcpy(msg + 2 * i, "\xc3\xa9", 2);        /* é: two bytes, one character */
	msg[2 * n] = '\0';
	ev.message = msg;
	s = flux_notify_event_json(&ev, "c", NULL, 0);
	b = cJSON_Parse(s);
	m = str(b, "message");
	for (i = 0; m[i]; i++)
		chars += ((unsigned char)m[i] & 0xC0) != 0x80;
	assert_int_equal(chars, FLUX_NOTIFY_MAX_MESSAGE);
	assert_int_equal(strlen(m), 2 * FLUX_NOTIFY_MAX_MESSAGE);
	cJSON_Delete(b);
	free(s);
	free(msg);
}

/* ------------------------------------------------------------ classification */

static void retry_classification(void **state)
{
	(void)state;
	assert_int_equal(flux_notify_classify(200), FLUX_NOTIFY_DELIVERED);
	assert_int_equal(flux_notify_classify(202), FLUX_NOTIFY_DELIVERED);
	assert_int_equal(flux_notify_classify(0), FLUX_NOTIFY_RETRY);      /* no answer */
	assert_int_equal(flux_notify_classify(500), FLUX_NOTIFY_RETRY);
	assert_int_equal(flux_notify_classify(502), FLUX_NOTIFY_RETRY);
	assert_int_equal(flux_notify_classify(503), FLUX_NOTIFY_RETRY);
	assert_int_equal(flux_notify_classify(504), FLUX_NOTIFY_RETRY);
	assert_int_equal(flux_notify_classify(501), FLUX_NOTIFY_REFUSED);
	assert_int_equal(flux_notify_classify(429), FLUX_NOTIFY_REFUSED);   /* duplicate */
	assert_int_equal(flux_notify_classify(400), FLUX_NOTIFY_REFUSED);
	assert_int_equal(flux_notify_classify(404), FLUX_NOTIFY_REFUSED);
	assert_int_equal(flux_notify_classify(413), FLUX_NOTIFY_REFUSED);
	assert_int_equal(flux_notify_classify(302), FLUX_NOTIFY_REFUSED);
}

static void urls_are_checked(void **state)
{
	struct err e;

	(void)state;
	assert_int_equal(flux_notify_check_url("http://notification-controller.flux-system.svc./", &e), 0);
	assert_int_equal(flux_notify_check_url("https://127.0.0.1:9090", &e), 0);
	assert_int_equal(flux_notify_check_url("", &e), -1);
	assert_int_equal(flux_notify_check_url(NULL, &e), -1);
	assert_int_equal(flux_notify_check_url("notification-controller:80", &e), -1);
	assert_int_equal(flux_notify_check_url("ftp://host/", &e), -1);
	assert_non_null(strstr(e.msg, "http or https"));
	assert_int_equal(flux_notify_check_url("http://", &e), -1);
	/* a password in the URL is never printed */
	assert_int_equal(flux_notify_check_url("ftp://u:s3cr3t@host/", &e), -1);
	assert_null(strstr(e.msg, "s3cr3t"));
}

/* ------------------------------------------------------------ delivery */

static void events_are_posted_as_json(void **state)
{
	struct flux_notify *n = start(8, 5);
	cJSON *b;

	(void)state;
	script(0);
	assert_int_equal(flux_notify_send(n, &STACK_EVENT), 0);
	assert_int_equal(flux_notify_send(n, &STACK_EVENT), 0);
	wait_requests(2);
	flux_notify_stop(n, 5000);
	assert_int_equal(requests(), 2);
	assert_string_equal(R.method[0], "POST");
	assert_string_equal(R.ctype[0], "application/json");
	b = cJSON_Parse(R.bodies[1]);
	assert_non_null(b);
	assert_string_equal(str(b, "reason"), "UpdateFailed");
	assert_string_equal(str(b, "reportingInstance"), "pc-0");
	cJSON_Delete(b);
}

static void an_object_is_read_for_its_reference(void **state)
{
	struct flux_notify *n = start(8, 1);
	cJSON *obj = cJSON_Parse("{\"apiVersion\":\"pulumi.com/v1\",\"kind\":\"Stack\",\"metadata\":{\"name\":\"db\","
	    "\"namespace\":\"prod\",\"uid\":\"u-1\",\"resourceVersion\":\"9\"}}");
	cJSON *b, *ref;

	(void)state;
	script(0);
	assert_int_equal(flux_notify_object(n, obj, "Normal", "Succeeded", "up: 2 created", "v1@sha256:ab"), 0);
	flux_notify_stop(n, 5000);
	assert_int_equal(requests(), 1);
	b = cJSON_Parse(R.bodies[0]);
	ref = cJSON_GetObjectItemCaseSensitive(b, "involvedObject");
	assert_string_equal(str(ref, "name"), "db");
	assert_string_equal(str(ref, "namespace"), "prod");
	assert_string_equal(str(ref, "uid"), "u-1");
	assert_string_equal(str(ref, "resourceVersion"), "9");
	assert_string_equal(str(cJSON_GetObjectItemCaseSensitive(b, "metadata"), "pulumi.com/revision"),
	    "v1@sha256:ab");
	cJSON_Delete(b);
	cJSON_Delete(obj);
	/* no forwarder: nothing, and no failure */
	assert_int_equal(flux_notify_object(NULL, NULL, "Normal", "R", "m", NULL), 0);
}

static void server_errors_are_retried_until_delivered(void **state)
{
	struct flux_notify *n = start(8, 5);

	(void)state;
	script(3, 503u, 500u, 202u);
	flux_notify_send(n, &STACK_EVENT);
	wait_requests(3);
	flux_notify_stop(n, 5000);
	assert_int_equal(requests(), 3);
	/* the body of a retry is the event's own, not a new one */
	assert_string_equal(R.bodies[0], R.bodies[2]);
}

static void stats_count_retries_and_delivery(void **state)
{
	struct flux_notify *n = start(8, 5);
	struct flux_notify_stats st;

	(void)state;
	script(2, 502u, 202u);
	flux_notify_send(n, &STACK_EVENT);
	wait_requests(2);
	/* delivered is counted after the answer: wait for it, not for time */
	for (int i = 0; i < 2000; i++) {
		flux_notify_get_stats(n, &st);
		if (st.delivered == 1)
			break;
		clock_sleep_ms(5);
	}
	assert_int_equal(st.delivered, 1);
	assert_int_equal(st.retries, 1);
	assert_int_equal(st.queued, 1);
	assert_int_equal(st.dropped_refused + st.dropped_retries_exhausted + st.dropped_queue_full, 0);
	flux_notify_stop(n, 5000);
}

static void too_many_requests_is_never_retried(void **state)
{
	struct flux_notify *n = start(8, 5);
	double before = exposed("pulumi_controller_notifications_dropped_total{reason=\"refused\"}");

	(void)state;
	script(2, 429u, 400u);
	flux_notify_send(n, &STACK_EVENT);
	flux_notify_send(n, &STACK_EVENT);
	wait_requests(2);
	flux_notify_stop(n, 5000);
	assert_int_equal(requests(), 2);          /* one POST each: neither was retried */
	assert_true(exposed("pulumi_controller_notifications_dropped_total{reason=\"refused\"}") >= before + 2);
}

static void refusals_are_counted(void **state)
{
	struct flux_notify *n = start(8, 5);
	struct flux_notify_stats st;

	(void)state;
	script(3, 429u, 404u, 501u);
	flux_notify_send(n, &STACK_EVENT);
	flux_notify_send(n, &STACK_EVENT);
	flux_notify_send(n, &STACK_EVENT);
	wait_requests(3);
	for (int i = 0; i < 2000; i++) {
		flux_notify_get_stats(n, &st);
		if (st.dropped_refused == 3)
			break;
		clock_sleep_ms(5);
	}
	assert_int_equal(st.dropped_refused, 3);
	assert_int_equal(st.retries, 0);
	assert_int_equal(st.delivered, 0);
	flux_notify_stop(n, 5000);
	assert_int_equal(requests(), 3);
}

static void attempts_are_bounded(void **state)
{
	struct flux_notify *n = start(8, 3);
	struct flux_notify_stats st;

	(void)state;
	script(6, 500u, 500u, 500u, 500u, 500u, 500u);
	flux_notify_send(n, &STACK_EVENT);
	wait_requests(3);
	for (int i = 0; i < 2000; i++) {
		flux_notify_get_stats(n, &st);
		if (st.dropped_retries_exhausted == 1)
			break;
		clock_sleep_ms(5);
	}
	assert_int_equal(st.dropped_retries_exhausted, 1);
	assert_int_equal(st.retries, 2);
	flux_notify_stop(n, 5000);
	assert_int_equal(requests(), 3);
}

static void a_dead_address_is_retried_then_dropped(void **state)
{
	struct flux_notify_opts o;
	struct flux_notify_stats st;
	struct flux_notify *n;
	struct err e;
	char url[64];
	struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handle, NULL,
	    MHD_OPTION_END);

	(void)state;
	/* a port that was just free: nothing listens there any more */
	assert_non_null(d);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port);
	MHD_stop_daemon(d);
	flux_notify_opts_default(&o);
	o.url = url;
	o.max_attempts = 3;
	o.backoff_initial_ms = 5;
	o.backoff_max_ms = 10;
	n = flux_notify_start(&o, &e);
	assert_non_null(n);
	assert_int_equal(flux_notify_send(n, &STACK_EVENT), 0);
	for (int i = 0; i < 4000; i++) {
		flux_notify_get_stats(n, &st);
		if (st.dropped_retries_exhausted == 1)
			break;
		clock_sleep_ms(5);
	}
	assert_int_equal(st.dropped_retries_exhausted, 1);
	assert_int_equal(st.retries, 2);
	flux_notify_stop(n, 5000);
}

static void a_full_queue_drops_and_counts_without_blocking(void **state)
{
	struct flux_notify *n = start(2, 1);
	struct flux_notify_stats st;
	double before = exposed("pulumi_controller_notifications_dropped_total{reason=\"queue_full\"}");
	int i, accepted = 0;

	(void)state;
	script(0);
	hold(1);
	assert_int_equal(flux_notify_send(n, &STACK_EVENT), 0);
	wait_requests(1);                 /* the sender is stuck in that POST */
	for (i = 0; i < 10; i++)
		accepted += flux_notify_send(n, &STACK_EVENT) == 0;
	assert_int_equal(accepted, 2);    /* the queue's size */
	flux_notify_get_stats(n, &st);
	assert_int_equal(st.dropped_queue_full, 8);
	assert_true(exposed("pulumi_controller_notifications_dropped_total{reason=\"queue_full\"}") >= before + 8);
	hold(0);
	flux_notify_stop(n, 5000);
	assert_int_equal(requests(), 3);
}

static void stop_drains_within_its_bound(void **state)
{
	struct flux_notify *n = start(8, 1);
	struct flux_notify_stats st;

	(void)state;
	script(0);
	hold(1);
	flux_notify_send(n, &STACK_EVENT);
	wait_requests(1);
	flux_notify_send(n, &STACK_EVENT);
	flux_notify_send(n, &STACK_EVENT);
	/* the receiver never answers: the POST in flight is cancelled at the
	 * deadline, and the two queued are counted as dropped */
	flux_notify_get_stats(n, &st);
	assert_int_equal(st.queued, 3);
	{
		/* stats are read before stop frees n; the shutdown drops are
		 * visible on the process's registry */
		double before = exposed("pulumi_controller_notifications_dropped_total{reason=\"shutdown\"}");
		flux_notify_stop(n, 300);
		assert_true(exposed("pulumi_controller_notifications_dropped_total{reason=\"shutdown\"}") >= before + 3);
	}
	hold(0);
	assert_int_equal(requests(), 1);
}

static void stop_sends_what_is_queued(void **state)
{
	struct flux_notify *n = start(8, 1);

	(void)state;
	script(0);
	hold(1);
	for (int i = 0; i < 4; i++)
		flux_notify_send(n, &STACK_EVENT);
	wait_requests(1);
	hold(0);
	flux_notify_stop(n, 10000);
	assert_int_equal(requests(), 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(body_has_every_field_of_the_go_type),
		cmocka_unit_test(normal_is_info_and_no_revision_no_metadata),
		cmocka_unit_test(incomplete_events_are_not_sent),
		cmocka_unit_test(message_is_cut_to_the_server_limit_on_a_character),
		cmocka_unit_test(retry_classification),
		cmocka_unit_test(urls_are_checked),
		cmocka_unit_test(events_are_posted_as_json),
		cmocka_unit_test(an_object_is_read_for_its_reference),
		cmocka_unit_test(server_errors_are_retried_until_delivered),
		cmocka_unit_test(stats_count_retries_and_delivery),
		cmocka_unit_test(too_many_requests_is_never_retried),
		cmocka_unit_test(refusals_are_counted),
		cmocka_unit_test(attempts_are_bounded),
		cmocka_unit_test(a_dead_address_is_retried_then_dropped),
		cmocka_unit_test(a_full_queue_drops_and_counts_without_blocking),
		cmocka_unit_test(stop_drains_within_its_bound),
		cmocka_unit_test(stop_sends_what_is_queued),
	};
	struct err e;
	int rc;

	log_setup(LOG_OFF, LOG_JSON, stderr);
	if (http_global_init(&e) < 0)
		return 1;
	rc = cmocka_run_group_tests(tests, setup, teardown);
	http_global_cleanup();
	return rc;
}
