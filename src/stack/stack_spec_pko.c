/*
 * stack_spec_pko.c - the Pulumi Kubernetes Operator's input fields that
 * stack_spec.c does not fold in itself, so that a PKO v2 manifest runs as
 * written (docs/migrating-from-pko.md, "What runs, and how"):
 *
 *   envs: [ConfigMap names]  every key of each ConfigMap is a variable
 *                            (PKO: the workspace pod's envFrom)
 *   envSecrets: [names]      the same for Secrets, after the ConfigMaps
 *   accessTokenSecret: name  PULUMI_ACCESS_TOKEN from its key accessToken
 *   secrets: {key: value}    secret config, like a secretsRef Literal
 *   targetDependents         up/preview/refresh/destroy --target-dependents
 *   runProgram               refresh/destroy --run-program
 *   useLocalStackOnly        a missing stack is an error, never created
 *   environment: [names]     `config env add` (Pulumi Cloud only)
 *
 * Each message names the field at fault, as in stack_spec.c.
 */
#include <stdlib.h>
#include <string.h>

#include "stack/stack_model.h"

/* ------------------------------------------------------------ helpers
 * shared with stack_spec.c (which sits above this file). */

int stack_spec_grow(void **arr, size_t n, size_t size, struct err *e)
{
	void *p = realloc(*arr, (n + 1) * size);

	if (p == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	*arr = p;
	memset((char *)p + n * size, 0, size);
	return 0;
}

/* One more zeroed element of arr (n long) and a copy of name for it: NULL
 * on no memory.  The copy is the caller's, to store in the element. */
static char *grown_copy(void **arr, size_t n, size_t size, const char *name, struct err *e)
{
	char *copy;

	if (stack_spec_grow(arr, n, size, e) < 0)
		return NULL;
	if ((copy = strdup(name)) == NULL)
		err_set(e, ERR_NOMEM, "out of memory");
	return copy;
}

int stack_spec_add_config(struct stack_spec *s, const char *field, const char *key, struct err *e)
{
	char *copy;

	/* The driver passes plaintext config as KEY=VALUE. */
	if (key[0] == '\0' || strchr(key, '=') != NULL)
		return err_set(e, ERR_INVALID, "%s: key \"%s\" must be non-empty and without '='", field,
		    key), -1;
	if ((copy = grown_copy((void **)&s->config, s->n_config, sizeof(*s->config), key, e)) == NULL)
		return -1;
	s->config[s->n_config++].key = copy;
	return 0;
}

int stack_spec_add_env(struct stack_spec *s, const char *field, const char *name, struct err *e)
{
	char *copy;

	if (name[0] == '\0' || strchr(name, '=') != NULL)
		return err_set(e, ERR_INVALID, "%s: \"%s\" is not an environment variable name", field,
		    name), -1;
	/* In a Job's pod these come after the controller's own, and the last of
	 * a name wins: PULUMI_CONTROLLER_UPDATE would replace the update the
	 * controller decided (its plan, source, verification). */
	if (stack_env_reserved(name))
		return err_set(e, ERR_INVALID, "%s.%s: reserved (the controller sets it)", field, name), -1;
	for (size_t i = 0; i < s->n_env; i++)
		if (strcmp(s->env[i].name, name) == 0)
			return err_set(e, ERR_INVALID, "%s.%s: the variable is set twice", field, name), -1;
	if ((copy = grown_copy((void **)&s->env, s->n_env, sizeof(*s->env), name, e)) == NULL)
		return -1;
	s->env[s->n_env++].name = copy;
	return 0;
}


/* Variables that make a program, a shell or git run other code than their
 * own (a preloaded library, an interpreter's startup file, a hook).  A key
 * of a listed ConfigMap or Secret chooses a variable's name, and whoever may
 * edit that object need not be who may run code where the CLI runs (the
 * controller's pod, with its token): such keys are left out. */
static int runs_other_code(const char *name)
{
	static const char *const prefixes[] = {
		"LD_", "PYTHON", "PERL5", "RUBY", "GIT_", "NODE_", "GO", "JAVA_TOOL_", "DOTNET_", "BASH_",
	};
	static const char *const names[] = { "ENV", "SHELLOPTS", "PROMPT_COMMAND", "_JAVA_OPTIONS",
		"JDK_JAVA_OPTIONS", "NPM_CONFIG_USERCONFIG", "NPM_CONFIG_GLOBALCONFIG" };

	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
			return 1;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(name, names[i]) == 0)
			return 1;
	return 0;
}

/* A key of an envFrom object that becomes a variable: one the driver takes
 * (pl_env_name_ok: a key like log.level or PATH would stop every update),
 * not the controller's own, and none that runs other code. */
int stack_env_name_ok(const char *name)
{
	return name != NULL && pl_env_name_ok(name) && !stack_env_reserved(name) && !runs_other_code(name);
}

/* A list of object names in the Stack's namespace; the keys are read when
 * a pass resolves its inputs (stack_inputs.c), since they are the object's
 * and may change without the Stack changing. */
int stack_spec_parse_env_from(const cJSON *list, const char *field, enum stack_value_kind kind,
    struct stack_spec *s, struct err *e)
{
	const cJSON *it;
	size_t i = 0;

	if (!cJSON_IsArray(list))
		return err_set(e, ERR_INVALID, "%s: must be a list of %s names", field,
		    kind == STACK_VAL_SECRET ? "Secret" : "ConfigMap"), -1;
	cJSON_ArrayForEach(it, list) {
		struct stack_env_from *v;
		if (!cJSON_IsString(it) || !stack_object_name_ok(it->valuestring))
			return err_set(e, ERR_INVALID, "%s[%zu]: must be the name of a %s in the Stack's namespace",
			    field, i, kind == STACK_VAL_SECRET ? "Secret" : "ConfigMap"), -1;
		i++;
		/* An object named again counts where it is named last, as the
		 * kubelet's envFrom reads it: its keys win over those between. */
		for (size_t j = 0; j < s->n_env_from; j++)
			if (s->env_from[j].kind == kind && strcmp(s->env_from[j].object, it->valuestring) == 0) {
				free(s->env_from[j].object);
				memmove(&s->env_from[j], &s->env_from[j + 1], (s->n_env_from - j - 1) * sizeof(*v));
				s->n_env_from--;
				break;
			}
		if (s->n_env_from >= STACK_ENV_FROM_MAX)
			return err_set(e, ERR_INVALID, "%s: more than %d ConfigMaps and Secrets in envs and "
			    "envSecrets together", field, STACK_ENV_FROM_MAX), -1;
		if ((v = realloc(s->env_from, (s->n_env_from + 1) * sizeof(*v))) == NULL)
			return err_set(e, ERR_NOMEM, "out of memory"), -1;
		s->env_from = v;
		v = &s->env_from[s->n_env_from];
		v->kind = kind;
		v->field = field;
		if ((v->object = strdup(it->valuestring)) == NULL)
			return err_set(e, ERR_NOMEM, "out of memory"), -1;
		s->n_env_from++;
	}
	return 0;
}

/* accessTokenSecret: the Secret's key accessToken as PULUMI_ACCESS_TOKEN,
 * a variable the spec names (so envRefs may not set it as well). */
static int parse_access_token(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	const cJSON *v = stack_field(spec, "accessTokenSecret");
	struct stack_value *val;

	if (v == NULL || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == '\0'))
		return 0;
	if (!cJSON_IsString(v) || !stack_object_name_ok(v->valuestring))
		return err_set(e, ERR_INVALID, "spec.accessTokenSecret: must be the name of a Secret in the "
		    "Stack's namespace"), -1;
	if (stack_spec_add_env(s, "spec.accessTokenSecret", "PULUMI_ACCESS_TOKEN", e) < 0)
		return -1;
	val = &s->env[s->n_env - 1].v;
	val->kind = STACK_VAL_SECRET;
	if ((val->object = strdup(v->valuestring)) == NULL || (val->key = strdup("accessToken")) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	return 0;
}

/* secrets: inline secret config, as a secretsRef Literal is: set with
 * `config set --secret` (value on stdin), masked everywhere, and kept out
 * of a Job (its <name>-job-inputs Secret carries it). */
static int parse_secrets(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	const cJSON *m = stack_field(spec, "secrets"), *it;

	if (m == NULL || cJSON_IsNull(m))
		return 0;
	if (!cJSON_IsObject(m))
		return err_set(e, ERR_INVALID, "spec.secrets: must be a map of keys to values"), -1;
	cJSON_ArrayForEach(it, m) {
		struct stack_config *c;
		if (!cJSON_IsString(it))
			return err_set(e, ERR_INVALID, "spec.secrets.%s: must be a string", it->string), -1;
		if (stack_spec_add_config(s, "spec.secrets", it->string, e) < 0)
			return -1;
		c = &s->config[s->n_config - 1];
		c->secret = 1;
		c->v.kind = STACK_VAL_LITERAL;
		if ((c->v.literal = strdup(it->valuestring)) == NULL)
			return err_set(e, ERR_NOMEM, "out of memory"), -1;
	}
	return 0;
}

/* The backend schemes that are no Pulumi Cloud (the DIY ones). */
static int diy_backend(const char *url)
{
	return url != NULL && strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0;
}

/* environment: Pulumi ESC environments, which only Pulumi Cloud has.  A
 * spec.backend that names another backend is refused here; a backend the
 * CLI finds itself (PULUMI_BACKEND_URL, the login) is known only to the
 * CLI, whose refusal is then the update's failure. */
static int parse_environments(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	const cJSON *v = stack_field(spec, "environment"), *it;
	size_t i = 0;

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsArray(v))
		return err_set(e, ERR_INVALID, "spec.environment: must be a list of environment names"), -1;
	if (cJSON_GetArraySize(v) == 0)
		return 0;
	/* Each is one `config env add` call in every update's set-up. */
	if (cJSON_GetArraySize(v) > STACK_ENVIRONMENTS_MAX)
		return err_set(e, ERR_INVALID, "spec.environment: more than %d environments",
		    STACK_ENVIRONMENTS_MAX), -1;
	if (diy_backend(s->backend)) {
		size_t n = strcspn(s->backend, ":");
		return err_set(e, ERR_INVALID, "spec.environment: Pulumi ESC environments need the Pulumi Cloud "
		    "backend, and spec.backend is a %.*s:// one; remove spec.environment or use Pulumi Cloud",
		    (int)(n < 16 ? n : 16), s->backend), -1;
	}
	if ((s->environments = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof(char *))) == NULL)
		return err_set(e, ERR_NOMEM, "out of memory"), -1;
	cJSON_ArrayForEach(it, v) {
		/* Each is one argument of `config env add`: a leading '-' would be a flag. */
		if (!cJSON_IsString(it) || it->valuestring[0] == '\0' || it->valuestring[0] == '-')
			return err_set(e, ERR_INVALID, "spec.environment[%zu]: must be an environment name "
			    "([project/]name)", i), -1;
		if ((s->environments[i] = strdup(it->valuestring)) == NULL)
			return err_set(e, ERR_NOMEM, "out of memory"), -1;
		s->n_environments = ++i;
	}
	return 0;
}

int stack_spec_parse_pko(const cJSON *spec, struct stack_spec *s, struct err *e)
{
	const cJSON *es = stack_field(spec, "envSecrets");

	if (stack_field_bool(spec, "targetDependents", "spec.targetDependents", &s->target_dependents, e) < 0 ||
	    stack_field_bool(spec, "runProgram", "spec.runProgram", &s->run_program, e) < 0 ||
	    stack_field_bool(spec, "useLocalStackOnly", "spec.useLocalStackOnly", &s->local_stack_only, e) < 0 ||
	    parse_environments(spec, s, e) < 0)
		return -1;

	/* After the envs list: PKO's envFrom holds the ConfigMaps first. */
	if (es != NULL && !cJSON_IsNull(es) &&
	    stack_spec_parse_env_from(es, "spec.envSecrets", STACK_VAL_SECRET, s, e) < 0)
		return -1;
	return parse_access_token(spec, s, e) < 0 || parse_secrets(spec, s, e) < 0 ? -1 : 0;
}
