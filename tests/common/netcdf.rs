//! A small netCDF classic reader for the tests (CDF-1, CDF-2, CDF-5): dimensions, variables
//! (type, dimensions, attributes, `begin`) and global attributes.

pub struct Var {
    pub name: String,
    pub dims: Vec<usize>,
    pub kind: u32,
    pub begin: u64,
    pub attributes: Vec<(String, u32, Vec<u8>)>,
}

pub struct File {
    pub version: u8,
    pub dims: Vec<(String, u64)>,
    pub globals: Vec<(String, u32, Vec<u8>)>,
    pub vars: Vec<Var>,
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    wide: bool,
}

impl Cursor<'_> {
    fn u32(&mut self) -> u32 {
        let v = u32::from_be_bytes(self.b[self.at..self.at + 4].try_into().unwrap());
        self.at += 4;
        v
    }

    fn count(&mut self) -> u64 {
        if self.wide {
            let v = u64::from_be_bytes(self.b[self.at..self.at + 8].try_into().unwrap());
            self.at += 8;
            v
        } else {
            u64::from(self.u32())
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let v = self.b[self.at..self.at + n].to_vec();
        self.at += n.next_multiple_of(4);
        v
    }

    fn name(&mut self) -> String {
        let n = self.count() as usize;
        String::from_utf8(self.bytes(n)).unwrap()
    }

    fn attributes(&mut self) -> Vec<(String, u32, Vec<u8>)> {
        let tag = self.u32();
        let n = self.count();
        assert!(tag == 0x0C || (tag == 0 && n == 0), "attribute list tag {tag}");
        (0..n)
            .map(|_| {
                let name = self.name();
                let kind = self.u32();
                let count = self.count() as usize;
                (name, kind, self.bytes(count * type_size(kind)))
            })
            .collect()
    }
}

pub fn type_size(kind: u32) -> usize {
    match kind {
        1 | 2 | 7 => 1,
        3 | 8 => 2,
        4 | 5 | 9 => 4,
        _ => 8,
    }
}

pub fn read(b: &[u8]) -> File {
    assert_eq!(&b[..3], b"CDF");
    let version = b[3];
    let mut c = Cursor { b, at: 4, wide: version == 5 };
    c.count();
    let tag = c.u32();
    let n = c.count();
    assert!(tag == 0x0A || n == 0);
    let dims = (0..n).map(|_| (c.name(), c.count())).collect();
    let globals = c.attributes();
    let tag = c.u32();
    let n = c.count();
    assert!(tag == 0x0B || n == 0);
    let vars = (0..n)
        .map(|_| {
            let name = c.name();
            let ndims = c.count();
            let dims = (0..ndims).map(|_| c.count() as usize).collect();
            let attributes = c.attributes();
            let kind = c.u32();
            c.count();
            let begin = if version == 1 { u64::from(c.u32()) } else { u64::from_be_bytes(c.bytes(8).try_into().unwrap()) };
            Var { name, dims, kind, begin, attributes }
        })
        .collect();
    File { version, dims, globals, vars }
}
