"""Volcano's job plugins (pytorch, env, svc, mpi, ssh) as kiban job fields.

pytorch gives ranks and MASTER_ADDR/MASTER_PORT, env the task index variables, svc the hosts
files, mpi a ``launcher: mpirun`` job, ssh where the generated keys are mounted; plugins kiban
lacks (tensorflow, ray) are refused.
"""

from __future__ import annotations

import re
from typing import Any

from kiban.domain.volcano_reader import TranslationReader, pretty

# The pytorch plugin's defaults (Volcano's documented ones).
PYTORCH_MASTER, PYTORCH_WORKER, PYTORCH_PORT = "master", "worker", 23456
INDEX_ENV = ["VK_TASK_INDEX", "VC_TASK_INDEX"]  # what Volcano's env plugin sets
PLUGINS = {"pytorch", "env", "svc", "mpi", "ssh"}
PLUGINS_REFUSED = {"tensorflow", "ray"}
# The mpi plugin's defaults (Volcano's documented ones): its port is the workers' sshd port.
MPI_MASTER, MPI_WORKER, MPI_PORT = "master", "worker", 22
SSH_KEY_PATH = "/root/.ssh"  # the ssh plugin's default sshKeyFilePath


class PluginReader(TranslationReader):
    """Reads ``spec.plugins``; the job-level reader (``volcano._Translator``) builds on it."""

    def plugins(self, plugins: dict[str, Any], tasks: list[Any], out: dict[str, Any]) -> list[int]:
        """Apply the plugins; the order of the tasks (the pytorch master's first: rank 0)."""
        order = list(range(len(tasks)))
        names = [t.get("name") if isinstance(t, dict) else None for t in tasks]
        ssh_arguments: list[Any] | None = None
        for name, args in plugins.items():
            where = f"spec.plugins.{name}"
            arguments = self.items(args, where)
            if name in PLUGINS_REFUSED:
                self.problem(
                    where,
                    f"the {name} plugin is not supported; kiban supports {pretty(sorted(PLUGINS))}",
                )
            elif name not in PLUGINS:
                self.problem(where, f"unknown plugin; kiban supports {pretty(sorted(PLUGINS))}")
            elif name == "env":
                out["indexEnv"] = list(INDEX_ENV)
            elif name == "svc":
                out["hostsFiles"] = True  # /etc/volcano/<task>.host, VC_<TASK>_HOSTS and _NUM
            elif name == "pytorch":
                order = self.pytorch(arguments, where, names, out)
            elif name == "mpi":
                order = self.mpi(arguments, where, names, out)
            elif name == "ssh":
                ssh_arguments = arguments
        if ssh_arguments is not None:  # after mpi, whatever the order they are written in
            self.ssh(ssh_arguments, "spec.plugins.ssh", out)
        if "mpi" in plugins and "pytorch" in plugins:
            self.problem("spec.plugins.mpi", "the mpi and pytorch plugins exclude each other")
        return order

    def plugin_arguments(
        self,
        arguments: list[Any],
        where: str,
        defaults: dict[str, str],
        flags: frozenset[str] = frozenset(),
    ) -> dict[str, str]:
        """``--name=value`` or ``--name value`` arguments (``flags`` take no value), over
        ``defaults``; an unknown argument is a problem naming its position."""
        values = dict(defaults)
        known = ", ".join([f"--{k}=..." for k in defaults] + [f"--{f}" for f in sorted(flags)])
        i = 0
        while i < len(arguments):
            arg = str(arguments[i])
            match = re.fullmatch(r"--?([a-z-]+)(?:=(.*))?", arg)
            if match is None or match.group(1) not in set(defaults) | flags:
                self.problem(f"{where}[{i}]", f"unknown argument {arg!r}; known: {known}")
                i += 1
                continue
            value = match.group(2)
            if match.group(1) in flags:
                value = "true" if value is None else value
            elif value is None and i + 1 < len(arguments):
                i += 1
                value = str(arguments[i])
            values[match.group(1)] = value or ""
            i += 1
        return values

    def mpi(
        self, arguments: list[Any], where: str, names: list[Any], out: dict[str, Any]
    ) -> list[int]:
        """``--master``/``--worker``/``--port``: the master task is the MPI launcher (kiban's
        ``launcher: mpirun``, started once every worker runs, with ``MPI_HOST`` naming the
        workers), the worker task holds the ranks; the port is the workers' sshd port."""
        values = self.plugin_arguments(
            arguments,
            where,
            {"master": MPI_MASTER, "worker": MPI_WORKER, "port": str(MPI_PORT)},
        )
        if values["port"] != str(MPI_PORT):
            if not values["port"].isdigit() or not 0 < int(values["port"]) < 65536:
                self.problem(where, f"--port {values['port']!r} is not a TCP port")
            else:
                self.notes.append(
                    f"{where}: --port={values['port']} is the port the workers' sshd listens "
                    "on; kiban opens no port for it (pods reach each other on any port): "
                    "pass it to mpirun (e.g. -mca plm_rsh_args '-p PORT')"
                )
        for role in ("master", "worker"):
            if values[role] not in names:
                self.problem(
                    where,
                    f"--{role} names task {values[role]!r}, which the job does not have",
                )
        if values["master"] not in names or values["worker"] not in names:
            return list(range(len(names)))
        out["launcher"] = "mpirun"
        out["hostsFiles"] = True  # the mpi plugin turns the svc plugin on (Volcano's docs)
        mpi = out.setdefault("mpi", {})
        mpi.update({"launcherTask": values["master"], "workerTask": values["worker"]})
        self.paths.append(("spec.mpi", where))
        master, worker = names.index(values["master"]), names.index(values["worker"])
        others = [i for i in range(len(names)) if i not in (master, worker)]
        if others:
            self.problem(
                where,
                f"an MPI job has a master and a worker task; this one also has "
                f"{pretty([str(names[i]) for i in others])}",
            )
        return [master, worker, *others]

    def ssh(self, arguments: list[Any], where: str, out: dict[str, Any]) -> None:
        """``--ssh-key-file-path``: where the generated keys are mounted (kiban makes them for
        every MPI job, in a Secret of the job); only with the mpi plugin, which says who
        connects to whom. Keys given in the file are refused: kiban generates them."""
        values = self.plugin_arguments(
            arguments,
            where,
            {"ssh-key-file-path": SSH_KEY_PATH, "ssh-private-key": "", "ssh-public-key": ""},
            frozenset({"no-root"}),
        )
        for given in ("ssh-private-key", "ssh-public-key"):
            if values[given]:
                self.problem(
                    where, f"--{given}: kiban generates each job's keys (in a Secret of its own)"
                )
        if values.get("no-root"):
            self.notes.append(
                f"{where}: --no-root has no counterpart: the keys are mounted at "
                f"{values['ssh-key-file-path']} whatever user the container runs as"
            )
        if "launcher" not in out:
            self.problem(
                where,
                "the ssh plugin is supported with the mpi plugin, which names the master and "
                "worker tasks: add mpi: [--master=TASK, --worker=TASK]",
            )
            return
        out.setdefault("mpi", {})["sshAuthMountPath"] = values["ssh-key-file-path"]

    def pytorch(
        self, arguments: list[Any], where: str, names: list[Any], out: dict[str, Any]
    ) -> list[int]:
        """``--master``/``--worker``/``--port``: the master's replica 0 is rank 0 and
        MASTER_ADDR, workers follow (rank = index + 1), MASTER_PORT is the port."""
        values = {"master": PYTORCH_MASTER, "worker": PYTORCH_WORKER, "port": str(PYTORCH_PORT)}
        i = 0
        while i < len(arguments):
            arg = str(arguments[i])
            match = re.fullmatch(r"--?(master|worker|port)(?:=(.*))?", arg)
            if match is None:
                self.problem(
                    f"{where}[{i}]",
                    f"unknown argument {arg!r}; known: --master=TASK, --worker=TASK, --port=PORT",
                )
                i += 1
                continue
            value = match.group(2)
            if value is None and i + 1 < len(arguments):
                i += 1
                value = str(arguments[i])
            values[match.group(1)] = value or ""
            i += 1
        if not values["port"].isdigit() or not 0 < int(values["port"]) < 65536:
            self.problem(where, f"--port {values['port']!r} is not a TCP port")
        else:
            out["masterPort"] = int(values["port"])
            self.paths.append(("spec.masterPort", where))
        if values["master"] not in names:
            self.problem(
                where, f"--master names task {values['master']!r}, which the job does not have"
            )
            return list(range(len(names)))
        master = names.index(values["master"])
        worker = names.index(values["worker"]) if values["worker"] in names else None
        first = [master] + ([worker] if worker is not None else [])
        others = [i for i in range(len(names)) if i not in first]
        if others:
            self.notes.append(
                f"{where}: tasks other than {values['master']} and {values['worker']} "
                f"({pretty([str(names[i]) for i in others])}) get ranks after them and count "
                "in WORLD_SIZE"
            )
        return first + others
