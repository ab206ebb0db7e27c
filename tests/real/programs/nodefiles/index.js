// Conformance program for the real pulumi CLI on the Node.js language host.
// A dynamic provider keeps each File resource in $PULUMI_STANDIN_CLOUD/files/<name>,
// so a test makes drift by editing or deleting that file.  The provider's
// functions are serialized by the SDK and run in the dynamic-provider plugin,
// so they require what they use inside their bodies.
"use strict";
const pulumi = require("@pulumi/pulumi");

function filePath(id) {
    const path = require("path");
    return path.join(process.env.PULUMI_STANDIN_CLOUD, "files", id);
}

const provider = {
    async create(inputs) {
        const fs = require("fs");
        const file = filePath(inputs.name);
        fs.mkdirSync(require("path").dirname(file), { recursive: true });
        fs.writeFileSync(file, inputs.content);
        return { id: inputs.name, outs: { name: inputs.name, content: inputs.content, path: file } };
    },
    async diff(id, olds, news) {
        // olds are the outputs, refreshed from the file by read().
        const replaces = olds.name !== news.name ? ["name"] : [];
        return { changes: replaces.length > 0 || olds.content !== news.content, replaces };
    },
    async read(id, props) {
        const fs = require("fs");
        const file = filePath(id);
        if (!fs.existsSync(file)) {
            return {};  // gone: refresh drops it from the state
        }
        return { id, props: { ...props, content: fs.readFileSync(file, "utf8") } };
    },
    async update(id, olds, news) {
        const file = filePath(id);
        require("fs").writeFileSync(file, news.content);
        return { outs: { name: id, content: news.content, path: file } };
    },
    async delete(id) {
        require("fs").rmSync(filePath(id), { force: true });
    },
};

class File extends pulumi.dynamic.Resource {
    constructor(name, args, opts) {
        super(provider, name, { path: undefined, ...args }, opts);
    }
}

const config = new pulumi.Config();
const note = new File("note", { name: "note", content: "fixed note" });
const motd = new File("motd", { name: "motd", content: config.get("greeting") || "hello" });

exports.notePath = note.path;
exports.motdContent = motd.content;
exports.secretOut = config.requireSecret("password");
