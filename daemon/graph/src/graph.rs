//! The graph: named tensors, constants, inputs with a batch dimension, and
//! nodes in topological order.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::error::GraphError;
use crate::op::Op;
use crate::{DType, Tensor};

/// Index of a tensor (a value) of a [`Graph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub(crate) usize);

impl ValueId {
    /// The index.
    pub const fn index(self) -> usize {
        self.0
    }
}

/// One dimension of an input's declared shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// The batch dimension, chosen per run.
    Batch,
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Batch => f.write_str("N"),
        }
    }
}

/// Formats a declared shape, e.g. `[N, 3, 224, 224]`.
pub fn fmt_dims(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims.iter().map(Dim::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// A graph input: a tensor a request provides.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// The tensor.
    pub id: ValueId,
    /// Its name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Declared shape; at most the first dimension is [`Dim::Batch`].
    pub shape: Vec<Dim>,
}

/// A graph output.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The tensor.
    pub id: ValueId,
    /// Its name.
    pub name: String,
}

/// A node: an operator applied to tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The node's name (unique names are made for unnamed nodes).
    pub name: String,
    /// The operator.
    pub op: Op,
    /// Inputs in the operator's order; `None` for an absent optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Outputs; `None` for an output the model does not use.
    pub outputs: Vec<Option<ValueId>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Producer {
    None,
    Input,
    Const,
    Node,
}

/// Bounds on what loading and running a model may allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest tensor a node may produce, in bytes.
    pub max_tensor_bytes: u64,
    /// Largest total of the constants (weights and folded tensors), in bytes.
    pub max_const_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_tensor_bytes: 4 << 30,
            max_const_bytes: 16 << 30,
        }
    }
}

/// A model graph. Built with [`GraphBuilder`], which checks it and puts the
/// nodes in topological order.
#[derive(Debug, Clone)]
pub struct Graph {
    pub(crate) names: Vec<String>,
    pub(crate) consts: Vec<Option<Arc<Tensor>>>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) inputs: Vec<Input>,
    pub(crate) outputs: Vec<Output>,
    pub(crate) limits: Limits,
}

impl Graph {
    /// The nodes, in topological order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The inputs a request provides.
    pub fn inputs(&self) -> &[Input] {
        &self.inputs
    }

    /// The outputs.
    pub fn outputs(&self) -> &[Output] {
        &self.outputs
    }

    /// A tensor's name.
    pub fn name(&self, id: ValueId) -> &str {
        &self.names[id.0]
    }

    /// A constant tensor's value.
    pub fn constant(&self, id: ValueId) -> Option<&Tensor> {
        self.consts.get(id.0).and_then(|c| c.as_deref())
    }

    /// Number of tensors.
    pub fn value_count(&self) -> usize {
        self.names.len()
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Whether some input has a [`Dim::Batch`] dimension.
    pub fn has_batch(&self) -> bool {
        self.inputs.iter().any(|i| i.shape.contains(&Dim::Batch))
    }

    /// Bytes of the constants the graph holds (weights, at their types).
    pub fn param_bytes(&self) -> u64 {
        self.consts.iter().flatten().map(|t| t.bytes() as u64).sum()
    }

    /// Elements of the constants.
    pub fn param_count(&self) -> u64 {
        self.consts.iter().flatten().map(|t| t.len() as u64).sum()
    }
}

/// Builds a [`Graph`] from tensors and nodes given in any order.
#[derive(Debug, Default)]
pub struct GraphBuilder {
    names: Vec<String>,
    by_name: HashMap<String, ValueId>,
    producer: Vec<Producer>,
    consts: Vec<Option<Arc<Tensor>>>,
    nodes: Vec<Node>,
    inputs: Vec<Input>,
    outputs: Vec<Output>,
    limits: Limits,
    const_bytes: u64,
    anon: usize,
}

impl GraphBuilder {
    /// An empty graph with these limits.
    pub fn new(limits: Limits) -> GraphBuilder {
        GraphBuilder {
            limits,
            ..GraphBuilder::default()
        }
    }

    /// The tensor named `name`, created if new.
    pub fn value(&mut self, name: &str) -> ValueId {
        if let Some(&id) = self.by_name.get(name) {
            return id;
        }
        let id = ValueId(self.names.len());
        self.names.push(name.to_owned());
        self.producer.push(Producer::None);
        self.consts.push(None);
        self.by_name.insert(name.to_owned(), id);
        id
    }

    /// Whether a tensor of this name has a producer (input, constant or node).
    pub fn is_defined(&self, name: &str) -> bool {
        self.by_name
            .get(name)
            .is_some_and(|id| self.producer[id.0] != Producer::None)
    }

    /// The constant named `name`, if it is one.
    pub fn constant(&self, name: &str) -> Option<&Tensor> {
        self.by_name
            .get(name)
            .and_then(|id| self.consts[id.0].as_deref())
    }

    /// The value of constant `id`, if it is one.
    pub fn constant_of(&self, id: ValueId) -> Option<&Tensor> {
        self.consts.get(id.0).and_then(|c| c.as_deref())
    }

    fn produce(&mut self, id: ValueId, p: Producer) -> Result<(), GraphError> {
        if self.producer[id.0] != Producer::None {
            return Err(GraphError::TwoWriters(self.names[id.0].clone()));
        }
        self.producer[id.0] = p;
        Ok(())
    }

    /// Declares a graph input.
    pub fn input(
        &mut self,
        name: &str,
        dtype: DType,
        shape: Vec<Dim>,
    ) -> Result<ValueId, GraphError> {
        let id = self.value(name);
        self.produce(id, Producer::Input)?;
        self.inputs.push(Input {
            id,
            name: name.to_owned(),
            dtype,
            shape,
        });
        Ok(id)
    }

    /// Declares a constant (a weight).
    pub fn constant_value(&mut self, name: &str, t: Tensor) -> Result<ValueId, GraphError> {
        let id = self.value(name);
        self.produce(id, Producer::Const)?;
        self.const_bytes += t.bytes() as u64;
        if self.const_bytes > self.limits.max_const_bytes {
            return Err(GraphError::TooLarge {
                node: name.to_owned(),
                op: "initializer",
                tensor: name.to_owned(),
                bytes: u128::from(self.const_bytes),
                limit: self.limits.max_const_bytes,
            });
        }
        self.consts[id.0] = Some(Arc::new(t));
        Ok(id)
    }

    /// A constant with a name of its own (for parameters an older opset
    /// gives as attributes).
    pub fn anonymous_constant(&mut self, hint: &str, t: Tensor) -> Result<ValueId, GraphError> {
        loop {
            self.anon += 1;
            let name = format!("{hint}::const{}", self.anon);
            if !self.by_name.contains_key(&name) {
                return self.constant_value(&name, t);
            }
        }
    }

    /// Adds a node; output names that are empty are unused outputs.
    pub fn node(
        &mut self,
        name: &str,
        op: Op,
        inputs: Vec<Option<ValueId>>,
        outputs: &[&str],
    ) -> Result<(), GraphError> {
        let mut outs = Vec::with_capacity(outputs.len());
        for &o in outputs {
            if o.is_empty() {
                outs.push(None);
            } else {
                let id = self.value(o);
                self.produce(id, Producer::Node)?;
                outs.push(Some(id));
            }
        }
        self.nodes.push(Node {
            name: name.to_owned(),
            op,
            inputs,
            outputs: outs,
        });
        Ok(())
    }

    /// Adds a node with one output and returns that output.
    pub fn op(
        &mut self,
        name: &str,
        op: Op,
        inputs: Vec<Option<ValueId>>,
        output: &str,
    ) -> Result<ValueId, GraphError> {
        self.node(name, op, inputs, &[output])?;
        Ok(self.value(output))
    }

    /// Declares a graph output.
    pub fn output(&mut self, name: &str) {
        let id = self.value(name);
        self.outputs.push(Output {
            id,
            name: name.to_owned(),
        });
    }

    /// Checks the graph (every read defined, every output produced, no
    /// cycle) and orders it, without rewriting it; [`GraphBuilder::build`]
    /// also applies the load-time passes.
    pub fn finish(self) -> Result<Graph, GraphError> {
        for n in &self.nodes {
            for &i in n.inputs.iter().flatten() {
                if self.producer[i.0] == Producer::None {
                    return Err(GraphError::Undefined {
                        node: n.name.clone(),
                        tensor: self.names[i.0].clone(),
                    });
                }
            }
        }
        for o in &self.outputs {
            if self.producer[o.id.0] == Producer::None {
                return Err(GraphError::MissingOutput(o.name.clone()));
            }
        }
        let order = topo_order(&self.nodes, self.names.len()).map_err(|stuck| {
            GraphError::Cycle(
                stuck
                    .iter()
                    .take(8)
                    .map(|&i| format!("'{}'", self.nodes[i].name))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        })?;
        let mut slots: Vec<Option<Node>> = self.nodes.into_iter().map(Some).collect();
        let nodes = order.into_iter().filter_map(|i| slots[i].take()).collect();
        Ok(Graph {
            names: self.names,
            consts: self.consts,
            nodes,
            inputs: self.inputs,
            outputs: self.outputs,
            limits: self.limits,
        })
    }
}

/// Kahn's algorithm; on a cycle, the nodes that could not be ordered.
fn topo_order(nodes: &[Node], n_values: usize) -> Result<Vec<usize>, Vec<usize>> {
    let mut producer_of = vec![usize::MAX; n_values];
    for (i, n) in nodes.iter().enumerate() {
        for &o in n.outputs.iter().flatten() {
            producer_of[o.0] = i;
        }
    }
    let mut indeg = vec![0usize; nodes.len()];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        for &v in n.inputs.iter().flatten() {
            let p = producer_of[v.0];
            if p != usize::MAX {
                indeg[i] += 1;
                users[p].push(i);
            }
        }
    }
    // Stable: ready nodes in file order.
    let mut ready: std::collections::BTreeSet<usize> =
        (0..nodes.len()).filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in &users[i] {
            indeg[u] -= 1;
            if indeg[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() == nodes.len() {
        Ok(order)
    } else {
        Err((0..nodes.len()).filter(|&i| indeg[i] > 0).collect())
    }
}
