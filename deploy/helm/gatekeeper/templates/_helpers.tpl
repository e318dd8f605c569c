{{/* Names (63 characters at most: they are DNS labels, and a pod's name is <fullname>-<ordinal>). */}}
{{- define "gatekeeper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The fullname leaves room for a StatefulSet pod's "-<ordinal>" and the controller-revision-hash label
(a StatefulSet's name is at most 52 characters for the revision label to stay valid). */}}
{{- define "gatekeeper.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gatekeeper.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gatekeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gatekeeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gatekeeper.labels" -}}
helm.sh/chart: {{ include "gatekeeper.chart" . }}
{{ include "gatekeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ (.Values.image.tag | default .Chart.AppVersion) | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/component: gatekeeper
app.kubernetes.io/part-of: rogerwilco
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gatekeeper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gatekeeper.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gatekeeper.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Where the chart mounts things. */}}
{{- define "gatekeeper.configDir" -}}/etc/gatekeeper/config{{- end }}
{{- define "gatekeeper.configFile" -}}/etc/gatekeeper/config/gatekeeper.yaml{{- end }}
{{- define "gatekeeper.profilesDir" -}}/etc/gatekeeper/profiles{{- end }}
{{- define "gatekeeper.kafkaTlsDir" -}}/etc/gatekeeper/tls/kafka{{- end }}
{{- define "gatekeeper.redisTlsDir" -}}/etc/gatekeeper/tls/redis{{- end }}
{{- define "gatekeeper.tokensDir" -}}/etc/gatekeeper/tokens{{- end }}
{{- define "gatekeeper.signingDir" -}}/etc/gatekeeper/signing{{- end }}

{{/* The HTTP port the daemon listens on (config.http.port): the container port, the probes and the Service's
target follow it. */}}
{{- define "gatekeeper.httpPort" -}}
{{- $http := get (.Values.config | default dict) "http" | default dict }}
{{- get $http "port" | default 9108 | int }}
{{- end }}

{{- define "gatekeeper.graceSeconds" -}}
{{- $g := get (.Values.config | default dict) "grace_seconds" }}
{{- if kindIs "invalid" $g }}10{{ else }}{{ $g }}{{ end }}
{{- end }}

{{/* terminationGracePeriodSeconds: config.grace_seconds + the margin, unless set explicitly (then it must leave
at least 5 s after the drain for the offsets' commit and the clients' close). */}}
{{- define "gatekeeper.terminationGracePeriodSeconds" -}}
{{- $grace := include "gatekeeper.graceSeconds" . | float64 }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add (ceil $grace | int) (.Values.terminationGraceMarginSeconds | int) }}
{{- else }}
{{- $t := .Values.terminationGracePeriodSeconds | int }}
{{- if lt (float64 $t) (addf $grace 5) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be at least config.grace_seconds (%v) + 5: the pod would be killed while in-flight work drains, before its offsets are committed" $t $grace) }}
{{- end }}
{{- $t }}
{{- end }}
{{- end }}

{{- define "gatekeeper.security" -}}
{{- $kafka := get (.Values.config | default dict) "kafka" | default dict }}
{{- toYaml (get $kafka "security" | default dict) }}
{{- end }}

{{/* The Kafka client mechanism as KEDA's kafka scaler names it. */}}
{{- define "gatekeeper.kedaSasl" -}}
{{- $m := (include "gatekeeper.security" . | fromYaml).sasl_mechanism | default "" }}
{{- dict "PLAIN" "plaintext" "SCRAM-SHA-256" "scram_sha256" "SCRAM-SHA-512" "scram_sha512" | pluck $m | first | default "" }}
{{- end }}

{{/* The daemon's configuration file: .Values.config with the paths of what the chart mounts. */}}
{{- define "gatekeeper.config" -}}
{{- $c := deepCopy (.Values.config | default dict) }}
{{- $kafka := get $c "kafka" | default dict }}
{{- $sec := get $kafka "security" | default dict }}
{{- $tls := .Values.secrets.kafkaTls }}
{{- if $tls.secretName }}
{{- if $tls.caKey }}{{ $_ := set $sec "ssl_cafile" (printf "%s/ca.crt" (include "gatekeeper.kafkaTlsDir" .)) }}{{ end }}
{{- if $tls.certKey }}{{ $_ := set $sec "ssl_certfile" (printf "%s/tls.crt" (include "gatekeeper.kafkaTlsDir" .)) }}{{ end }}
{{- if $tls.keyKey }}{{ $_ := set $sec "ssl_keyfile" (printf "%s/tls.key" (include "gatekeeper.kafkaTlsDir" .)) }}{{ end }}
{{- end }}
{{- if $sec }}{{ $_ := set $kafka "security" $sec }}{{ end }}
{{- if $kafka }}{{ $_ := set $c "kafka" $kafka }}{{ end }}
{{- if .Values.secrets.redisTls.secretName }}
{{- $redis := get $c "redis" | default dict }}
{{- $_ := set $redis "tls" true }}
{{- $_ := set $redis "tls_ca_file" (printf "%s/ca.crt" (include "gatekeeper.redisTlsDir" .)) }}
{{- $_ := set $c "redis" $redis }}
{{- end }}
{{- if .Values.secrets.apiTokens.secretName }}
{{- $http := get $c "http" | default dict }}
{{- $_ := set $http "tokens_file" (printf "%s/tokens.yaml" (include "gatekeeper.tokensDir" .)) }}
{{- $_ := set $c "http" $http }}
{{- end }}
{{- if .Values.secrets.signingKey.secretName }}
{{- $signing := get $c "signing" | default dict }}
{{- $_ := set $signing "private_key_file" (printf "%s/signing.pem" (include "gatekeeper.signingDir" .)) }}
{{- $_ := set $c "signing" $signing }}
{{- end }}
{{- if .Values.profiles }}
{{- $dirs := get $c "profile_dirs" | default list }}
{{- $_ := set $c "profile_dirs" (append $dirs (include "gatekeeper.profilesDir" .)) }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/* The Service's job label in Prometheus (files/prometheus-rules.yaml's up alerts select ".*gatekeeper.*"). */}}
{{- define "gatekeeper.jobName" -}}
{{- .Values.serviceMonitor.jobName | default (include "gatekeeper.fullname" .) }}
{{- end }}

{{/* Checks across values that a JSON schema cannot express; each failure says what to change. */}}
{{- define "gatekeeper.validate" -}}
{{- $sec := include "gatekeeper.security" . | fromYaml }}
{{- $protocol := $sec.protocol | default "PLAINTEXT" }}
{{- $s := .Values.secrets }}
{{- if hasPrefix "SASL" $protocol }}
{{- if not $sec.sasl_mechanism }}
{{- fail (printf "config.kafka.security.protocol %s needs config.kafka.security.sasl_mechanism" $protocol) }}
{{- end }}
{{- if not $s.kafkaSaslPassword.name }}
{{- fail (printf "config.kafka.security.sasl_mechanism %s needs a password: set secrets.kafkaSaslPassword.name (and .key) to an existing Secret" $sec.sasl_mechanism) }}
{{- end }}
{{- if and (not $sec.sasl_username) (not $s.kafkaSaslUsername.name) }}
{{- fail (printf "config.kafka.security.sasl_mechanism %s needs a user: set config.kafka.security.sasl_username or secrets.kafkaSaslUsername" $sec.sasl_mechanism) }}
{{- end }}
{{- else }}
{{- if or $sec.sasl_mechanism $sec.sasl_username $s.kafkaSaslPassword.name $s.kafkaSaslUsername.name }}
{{- fail (printf "SASL settings (config.kafka.security.sasl_*, secrets.kafkaSasl*) are given but config.kafka.security.protocol is %s: use SASL_SSL or SASL_PLAINTEXT, or remove them" $protocol) }}
{{- end }}
{{- end }}
{{- if and $sec.sasl_username $s.kafkaSaslUsername.name }}
{{- fail "the Kafka SASL user is given twice: config.kafka.security.sasl_username and secrets.kafkaSaslUsername; keep one" }}
{{- end }}
{{- $tls := $s.kafkaTls }}
{{- if $tls.secretName }}
{{- if not (has $protocol (list "SSL" "SASL_SSL")) }}
{{- fail (printf "secrets.kafkaTls is set but config.kafka.security.protocol is %s: the certificates would not be used (SSL or SASL_SSL)" $protocol) }}
{{- end }}
{{- if not (or $tls.caKey $tls.certKey) }}
{{- fail "secrets.kafkaTls.secretName is set but names no file: set caKey (and certKey, keyKey for mutual TLS)" }}
{{- end }}
{{- if ne (empty $tls.certKey) (empty $tls.keyKey) }}
{{- fail "secrets.kafkaTls: mutual TLS needs both certKey and keyKey (or neither)" }}
{{- end }}
{{- end }}
{{- if and $s.kafkaSslKeyPassword.name (not $tls.keyKey) }}
{{- fail "secrets.kafkaSslKeyPassword is the client key's password: it needs secrets.kafkaTls.secretName and keyKey" }}
{{- end }}
{{- if or $sec.ssl_certfile $sec.ssl_keyfile $sec.ssl_cafile }}
{{- if $tls.secretName }}
{{- fail "config.kafka.security.ssl_cafile/ssl_certfile/ssl_keyfile are set by the chart from secrets.kafkaTls: remove them from config" }}
{{- end }}
{{- end }}
{{- $redis := get (.Values.config | default dict) "redis" | default dict }}
{{- if .Values.secrets.redisTls.secretName }}
{{- if hasPrefix "unix://" ($redis.url | default "") }}
{{- fail "secrets.redisTls cannot be used with a unix:// config.redis.url" }}
{{- end }}
{{- if $redis.tls_ca_file }}
{{- fail "config.redis.tls_ca_file is set by the chart from secrets.redisTls: remove it from config" }}
{{- end }}
{{- end }}
{{- $http := get (.Values.config | default dict) "http" | default dict }}
{{- if and .Values.secrets.apiTokens.secretName $http.tokens_file }}
{{- fail "config.http.tokens_file is set by the chart from secrets.apiTokens: remove it from config" }}
{{- end }}
{{- $signing := get (.Values.config | default dict) "signing" | default dict }}
{{- if and .Values.secrets.signingKey.secretName $signing.private_key_file }}
{{- fail "config.signing.private_key_file is set by the chart from secrets.signingKey: remove it from config" }}
{{- end }}
{{- $as := .Values.autoscaling }}
{{- if $as.enabled }}
{{- if gt ($as.minReplicas | int) ($as.maxReplicas | int) }}
{{- fail (printf "autoscaling.minReplicas (%v) is more than autoscaling.maxReplicas (%v)" $as.minReplicas $as.maxReplicas) }}
{{- end }}
{{- end }}
{{- if and .Values.prometheusRule.enabled .Values.serviceMonitor.enabled (not (contains "gatekeeper" (include "gatekeeper.jobName" .))) }}
{{- fail (printf "the ServiceMonitor's job %q does not contain \"gatekeeper\": the GatekeeperDown and GatekeeperAbsent rules (up{job=~\".*gatekeeper.*\"}) would never see it; set serviceMonitor.jobName" (include "gatekeeper.jobName" .)) }}
{{- end }}
{{- end }}
